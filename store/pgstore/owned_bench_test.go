package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/pgstore"
)

// fillDrain inserts n rows over keys distinct keys (0: keyless) with one
// INSERT … SELECT, as a plain-SQL producer's backlog, and runs ANALYZE.
func fillDrain(b *testing.B, pool *pgxpool.Pool, table string, n, keys int) {
	b.Helper()
	key := "''"
	if keys > 0 {
		key = fmt.Sprintf("'k-' || (g %% %d)", keys)
	}
	sql := "INSERT INTO " + table + " (topic, event_key, event_type, payload) SELECT 'orders', " + key + ", 'OrderPaid', '\\x7b226f726465725f6964223a34322c22616d6f756e745f63656e7473223a313939397d' FROM generate_series(1, $1) g"
	if _, err := pool.Exec(context.Background(), sql, n); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), "VACUUM ANALYZE "+table); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkClaimOwnedDrain drains a backlog of 50,000 rows, in batches of
// 1,000, one claimer with two claims in flight (the next claim is made
// before the previous one is acked, as a relay overlaps them), two ways
// in the same run on identical tables: the
// raw SQL claim-and-delete (DELETE … WHERE id IN (SELECT … ORDER BY id
// LIMIT 1000 FOR UPDATE SKIP LOCKED) RETURNING …, the limit any outbox on
// this database meets) and Claim + AckClaim over all 64 shards, and
// reports each rate and the ratio to raw SQL. No broker: this is the store's cost alone.
func BenchmarkClaimOwnedDrain(b *testing.B) {
	const n, batch = 50_000, 1000
	for _, keys := range []int{1, 10, 1000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			pool, _ := openPool(b)
			ctx := context.Background()
			var raw, owned time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				_, rt := migratedStore(b, pool, "bench_", pgstore.Config{VacuumAfter: -1})
				ost, ot := migratedStore(b, pool, "bench_", pgstore.Config{VacuumAfter: -1})
				fillDrain(b, pool, rt, n, keys)
				fillDrain(b, pool, ot, n, keys)
				b.StartTimer()
				// Rotate which drain runs first, so a drift in the shared
				// machine's load does not always favour the same one.
				drains := []func(){
					func() { raw += rawDrain(b, pool, rt, n, batch) },
					func() {
						own, err := ost.Balance(ctx, driver.BalanceParams{Owner: "bench", LeaseFor: time.Minute})
						if err != nil {
							b.Fatal(err)
						}
						owned += pipelinedDrain(b, ost, n, func(l driver.Lease) (driver.Claim, error) {
							return ost.Claim(ctx, driver.ClaimParams{Lease: l, Limit: batch, LeaseFor: time.Minute, Shards: own.Held})
						})
					},
				}
				for j := range drains {
					drains[(i+j)%len(drains)]()
				}
			}
			total := float64(n * b.N)
			b.ReportMetric(total/raw.Seconds(), "ev/s-raw-sql")
			b.ReportMetric(total/owned.Seconds(), "ev/s-owned")
			b.ReportMetric(100*raw.Seconds()/owned.Seconds(), "%owned/raw")
		})
	}
}

// BenchmarkShardIndexInsertCost measures what the shard index (migration
// 8) costs a producer: a one-row business transaction that enqueues one
// event (EnqueuePgxTx), 8 writers, against a table with the index and one
// without it (dropped), alternating round by round, reported as the
// second's and the first's cost over the business row alone.
func BenchmarkShardIndexInsertCost(b *testing.B) {
	pool, _ := openPool(b)
	ctx := context.Background()
	with, _ := migratedStore(b, pool, "bench_", pgstore.Config{DisableNotify: true})
	without, wt := migratedStore(b, pool, "bench_", pgstore.Config{DisableNotify: true})
	if _, err := pool.Exec(ctx, "DROP INDEX "+pgx.Identifier{wt + "_shard_idx"}.Sanitize()); err != nil {
		b.Fatal(err)
	}
	orders := uniqueTable("bench_") + "_orders"
	if _, err := pool.Exec(ctx, "CREATE TABLE "+orders+" (id BIGSERIAL PRIMARY KEY, customer TEXT NOT NULL, amount_cents BIGINT NOT NULL, status TEXT NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+orders) })
	payload := []byte(`{"order_id":42,"customer":"c-7","amount_cents":1999,"status":"PAID"}`)
	insert := "INSERT INTO " + orders + " (customer, amount_cents, status) VALUES ($1, $2, 'PAID')"
	stores := []*pgstore.Store{nil, without, with}
	tx := func(kind int, i int64) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, insert, "c-7", 1999); err != nil {
				return err
			}
			if kind == 0 {
				return nil
			}
			return stores[kind].EnqueuePgxTx(ctx, tx, outbox.Message{Topic: "orders", Key: fmt.Sprintf("order-%d", i), Type: "OrderPaid", Payload: payload})
		})
	}
	var took [3]time.Duration
	const per = 500
	rounds := max(b.N/per, 1)
	b.ResetTimer()
	for round := 0; round < rounds; round++ {
		for kind := range took {
			took[kind] += runWriters(b, pool, per, func(i int64) error { return tx(kind, i) })
		}
	}
	b.StopTimer()
	cost := func(d time.Duration) float64 { return 100 * (d.Seconds()/took[0].Seconds() - 1) }
	b.ReportMetric(float64(per*rounds)/took[0].Seconds(), "tx/s-plain")
	b.ReportMetric(cost(took[1]), "%outbox-without-shard-index")
	b.ReportMetric(cost(took[2]), "%outbox-with-shard-index")
}

// rawDrain claims-and-deletes the n rows of table in batches with plain
// SQL, one connection, and returns how long it took.
func rawDrain(b *testing.B, pool *pgxpool.Pool, table string, n, batch int) time.Duration {
	start := time.Now()
	got := 0
	for got < n {
		rows, err := pool.Query(context.Background(), "DELETE FROM "+table+" WHERE id IN (SELECT id FROM "+table+" WHERE status = 'NEW' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id, event_id, topic, event_key, event_type, payload, headers", batch)
		if err != nil {
			b.Fatal(err)
		}
		m := 0
		for rows.Next() {
			m++
		}
		if rows.Err() != nil {
			b.Fatal(rows.Err())
		}
		if m == 0 {
			b.Fatalf("raw drain stopped at %d of %d", got, n)
		}
		got += m
	}
	return time.Since(start)
}

// pipelinedDrain drains n events through claim and AckClaim with two
// claims in flight, as a relay overlaps the next claim with the current
// publish: the next claim is made before the previous one is acked. It
// returns how long it took.
func pipelinedDrain(b *testing.B, st *pgstore.Store, n int, claim func(driver.Lease) (driver.Claim, error)) time.Duration {
	ctx := context.Background()
	start := time.Now()
	got := 0
	var prev driver.Claim
	for epoch := int64(1); got < n; epoch++ {
		c, err := claim(driver.Lease{Owner: "bench", Epoch: epoch})
		if err != nil {
			b.Fatal(err)
		}
		if len(prev.Events) > 0 {
			if err := st.AckClaim(ctx, driver.AckClaimParams{Lease: prev.Lease, N: len(prev.Events)}); err != nil {
				b.Fatal(err)
			}
		} else if len(c.Events) == 0 {
			b.Fatalf("drain stopped at %d of %d", got, n)
		}
		got += len(c.Events)
		prev = c
	}
	if len(prev.Events) > 0 {
		if err := st.AckClaim(ctx, driver.AckClaimParams{Lease: prev.Lease, N: len(prev.Events)}); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// BenchmarkShardIndexInsertCPU is BenchmarkShardIndexInsertCost measured
// as the database backend's own CPU time (see oneBackend), which other
// load on the machine hardly moves: one-row business transactions with
// one outbox row, into a table with the shard index and one without,
// alternating in rounds of 100. It reports the CPU per transaction without
// the index and the index's extra CPU in percent of it.
func BenchmarkShardIndexInsertCPU(b *testing.B) {
	pool, _ := openPool(b)
	ctx := context.Background()
	one, _, backendCPU := oneBackend(b, pool)
	with, _ := migratedStore(b, one, "bench_", pgstore.Config{DisableNotify: true})
	without, wt := migratedStore(b, one, "bench_", pgstore.Config{DisableNotify: true})
	if _, err := pool.Exec(ctx, "DROP INDEX "+pgx.Identifier{wt + "_shard_idx"}.Sanitize()); err != nil {
		b.Fatal(err)
	}
	orders := uniqueTable("bench_") + "_orders"
	if _, err := pool.Exec(ctx, "CREATE TABLE "+orders+" (id BIGSERIAL PRIMARY KEY, customer TEXT NOT NULL, amount_cents BIGINT NOT NULL, status TEXT NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+orders) })
	payload := []byte(`{"order_id":42,"customer":"c-7","amount_cents":1999,"status":"PAID"}`)
	insert := "INSERT INTO " + orders + " (customer, amount_cents, status) VALUES ($1, $2, 'PAID')"
	stores := []*pgstore.Store{without, with}
	var spent [2]time.Duration
	const per = 100
	rounds := max(b.N/per, 1)
	b.ResetTimer()
	for round := 0; round < rounds; round++ {
		for k := range spent {
			kind := (k + round) % len(spent)
			before := backendCPU()
			for i := 0; i < per; i++ {
				err := pgx.BeginFunc(ctx, one, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, insert, "c-7", 1999); err != nil {
						return err
					}
					return stores[kind].EnqueuePgxTx(ctx, tx, outbox.Message{Topic: "orders", Key: fmt.Sprintf("order-%d-%d", round, i), Type: "OrderPaid", Payload: payload})
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			spent[kind] += backendCPU() - before
		}
	}
	b.StopTimer()
	n := float64(per * rounds)
	b.ReportMetric(spent[0].Seconds()/n*1e6, "µs-cpu/tx-without-index")
	b.ReportMetric(100*(spent[1].Seconds()/spent[0].Seconds()-1), "%cpu+shard-index")
}

// BenchmarkClaimOwnedDrainCPU is BenchmarkClaimOwnedDrain measured as the
// database backend's own CPU time (every statement of each drain runs on
// one connection), per 1,000 events drained: raw SQL claim-and-delete,
// and Claim + AckClaim, two claims in flight.
func BenchmarkClaimOwnedDrainCPU(b *testing.B) {
	const n, batch = 50_000, 1000
	for _, keys := range []int{1, 1000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			pool, _ := openPool(b)
			ctx := context.Background()
			one, _, backendCPU := oneBackend(b, pool)
			var raw, owned time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				_, rt := migratedStore(b, one, "bench_", pgstore.Config{VacuumAfter: -1, DisableNotify: true})
				ost, ot := migratedStore(b, one, "bench_", pgstore.Config{VacuumAfter: -1, DisableNotify: true})
				fillDrain(b, pool, rt, n, keys)
				fillDrain(b, pool, ot, n, keys)
				// Plan each claim statement once on the connection first (a
				// relay does so once per connection and set of shards, then
				// claims thousands of times): 64 branches take tens of
				// milliseconds to plan, which would weigh on 50 claims.
				own, err := ost.Balance(ctx, driver.BalanceParams{Owner: "bench", LeaseFor: time.Minute})
				if err != nil {
					b.Fatal(err)
				}
				warm := driver.Lease{Owner: "bench", Epoch: 0} // the drains use epochs from 1
				warmups := []struct {
					st    *pgstore.Store
					claim func() (driver.Claim, error)
				}{
					{ost, func() (driver.Claim, error) {
						return ost.Claim(ctx, driver.ClaimParams{Lease: warm, Limit: 1, LeaseFor: time.Minute, Shards: own.Held})
					}},
				}
				for _, w := range warmups {
					c, err := w.claim()
					if err != nil || len(c.Events) != 1 {
						b.Fatalf("warm-up claim: %d events, %v", len(c.Events), err)
					}
					if err := w.st.Release(ctx, driver.ReleaseParams{Lease: c.Lease, IDs: []int64{c.Events[0].ID}}); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				measure := func(d *time.Duration, f func()) {
					before := backendCPU()
					f()
					*d += backendCPU() - before
				}
				drains := []func(){
					func() { measure(&raw, func() { rawDrain(b, one, rt, n, batch) }) },
					func() {
						measure(&owned, func() {
							pipelinedDrain(b, ost, n, func(l driver.Lease) (driver.Claim, error) {
								return ost.Claim(ctx, driver.ClaimParams{Lease: l, Limit: batch, LeaseFor: time.Minute, Shards: own.Held})
							})
						})
					},
				}
				for j := range drains {
					drains[(i+j)%len(drains)]()
				}
			}
			per := float64(n*b.N) / batch
			b.ReportMetric(raw.Seconds()/per*1e3, "ms-cpu/1000ev-raw-sql")
			b.ReportMetric(owned.Seconds()/per*1e3, "ms-cpu/1000ev-owned")
		})
	}
}

// BenchmarkClaimKeepUp measures a relay that keeps up: each round, 4 new
// events of the relay's shards are inserted, then claimed (and acked) by a relay
// holding half the shards, as one of two relays does at a steady rate. It
// reports the wall time of the Claim call and, in the same rounds, of the
// raw SQL claim-and-delete of 4 rows (DELETE … WHERE id IN (SELECT … ORDER
// BY id LIMIT 4 FOR UPDATE SKIP LOCKED) RETURNING …: no order, no
// fencing, committed without waiting for the flush as the claim is) on a
// table of the same shape: the floor of one claim's round
// trip on this database.
func BenchmarkClaimKeepUp(b *testing.B) {
	pool, _ := openPool(b)
	ctx := context.Background()
	st, table := migratedStore(b, pool, "bench_", pgstore.Config{VacuumAfter: -1})
	_, raw := migratedStore(b, pool, "bench_", pgstore.Config{VacuumAfter: -1})
	other, err := st.Balance(ctx, driver.BalanceParams{Owner: "other", LeaseFor: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	own, err := st.Balance(ctx, driver.BalanceParams{Owner: "bench", LeaseFor: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	for range 10 { // the other relay hands over the shards over its share
		var keep []int
		for _, l := range other.Held {
			if l.Revoke {
				keep = append(keep, l.Shard)
			}
		}
		if other, err = st.Balance(ctx, driver.BalanceParams{Owner: "other", LeaseFor: time.Hour, Release: keep}); err != nil {
			b.Fatal(err)
		}
		if own, err = st.Balance(ctx, driver.BalanceParams{Owner: "bench", LeaseFor: time.Hour}); err != nil {
			b.Fatal(err)
		}
		if len(own.Held) == 32 {
			break
		}
	}
	if len(own.Held) != 32 {
		b.Fatalf("the relay holds %d shards; want 32", len(own.Held))
	}
	// keys of the relay's own shards, so that each claim takes its 4 events
	mine := map[int]bool{}
	for _, l := range own.Held {
		mine[l.Shard] = true
	}
	var keys []string
	for n := 0; len(keys) < 25; n++ {
		k := fmt.Sprintf("order-%d", n)
		shard, err := st.ShardOf(ctx, k, 0)
		if err != nil {
			b.Fatal(err)
		}
		if mine[shard] {
			keys = append(keys, k)
		}
	}
	next := 0
	insert := func(t string, n int) {
		for range n {
			next++
			if _, err := pool.Exec(ctx, "INSERT INTO "+t+" (topic, event_key, event_type, payload) VALUES ('orders', $1, 'OrderPaid', '\\x7b7d')", keys[next%len(keys)]); err != nil {
				b.Fatal(err)
			}
		}
	}
	rawClaim := "DELETE FROM " + raw + " WHERE id IN (SELECT id FROM " + raw + " WHERE status = 'NEW' ORDER BY id LIMIT 4 FOR UPDATE SKIP LOCKED) RETURNING id, event_id, topic, event_key, event_type, payload, headers"
	// the raw claim commits as the relay's claims do: without waiting
	// for the WAL flush (synchronous_commit off)
	cfg := pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	rawPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer rawPool.Close()
	var owned, floor time.Duration
	claimed := 0
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		insert(table, 4)
		insert(raw, 4)
		b.StartTimer()
		start := time.Now()
		l := driver.Lease{Owner: "bench", Epoch: int64(i + 1)}
		c, err := st.Claim(ctx, driver.ClaimParams{Lease: l, Limit: 1000, LeaseFor: time.Minute, Shards: own.Held})
		if err != nil {
			b.Fatal(err)
		}
		owned += time.Since(start)
		claimed += len(c.Events)
		start = time.Now()
		rows, err := rawPool.Query(ctx, rawClaim)
		if err != nil {
			b.Fatal(err)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		floor += time.Since(start)
		b.StopTimer()
		if err := st.AckClaim(ctx, driver.AckClaimParams{Lease: l, N: len(c.Events)}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(owned.Microseconds())/float64(b.N), "µs/claim")
	b.ReportMetric(float64(floor.Microseconds())/float64(b.N), "µs/raw-claim")
	b.ReportMetric(float64(claimed)/float64(b.N), "events/claim")
}

// BenchmarkClaimEmptyCPU measures what a claim costs the database when it
// finds nothing, as most claims of a relay that keeps up find one event or
// none: the database backend's CPU per Claim call (see oneBackend), a relay
// holding half the shards, against a `SELECT 1` round trip on the same
// connection. Its cost is the set-up of the claim's statements, which
// PostgreSQL does for every execution whatever the rows.
func BenchmarkClaimEmptyCPU(b *testing.B) {
	pool, _ := openPool(b)
	ctx := context.Background()
	one, _, backendCPU := oneBackend(b, pool)
	st, _ := migratedStore(b, one, "bench_", pgstore.Config{VacuumAfter: -1, DisableNotify: true})
	own, err := st.Balance(ctx, driver.BalanceParams{Owner: "bench", LeaseFor: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	held := own.Held[:len(own.Held)/2]
	var claim, floor time.Duration
	b.ResetTimer()
	for i := range b.N {
		before := backendCPU()
		if _, err := st.Claim(ctx, driver.ClaimParams{Lease: driver.Lease{Owner: "bench", Epoch: int64(i + 1)}, Limit: 500, LeaseFor: time.Minute, Shards: held}); err != nil {
			b.Fatal(err)
		}
		mid := backendCPU()
		if _, err := one.Exec(ctx, "SELECT 1"); err != nil {
			b.Fatal(err)
		}
		claim += mid - before
		floor += backendCPU() - mid
	}
	b.ReportMetric(float64(claim.Microseconds())/float64(b.N), "µs-cpu/claim")
	b.ReportMetric(float64(floor.Microseconds())/float64(b.N), "µs-cpu/select1")
}
