package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/pgstore"
)

// writers is the concurrency DESIGN's target is stated at.
const writers = 8

// BenchmarkOutboxRowOverhead measures one-row business transactions with
// and without one outbox row, 8 concurrent writers, in the same run, and
// reports the cost of the outbox row as a percentage (target ≤ 25 %), both
// as a statement of its own (EnqueuePgxTx) and queued in one batch with the
// business row (EnqueueInBatch: the same round trips as the business
// transaction alone). Two controls run in the same rounds: a second business
// row in the same table, and the floor of any outbox design written as a
// statement of its own: a minimal row (id, topic, key, payload) in a second
// table.
func BenchmarkOutboxRowOverhead(b *testing.B) {
	for _, v := range []struct {
		name string
		cfg  pgstore.Config
	}{
		{"notify=coalesced", pgstore.Config{}}, // the default
		{"notify=every", pgstore.Config{NotifyInterval: -1}},
		{"notify=off", pgstore.Config{DisableNotify: true}},
	} {
		b.Run(v.name, func(b *testing.B) {
			pool, _ := openPool(b)
			ctx := context.Background()
			st, table := migratedStore(b, pool, "bench_", v.cfg)
			orders := table + "_orders"
			if _, err := pool.Exec(ctx, "CREATE TABLE "+orders+" (id BIGSERIAL PRIMARY KEY, customer TEXT NOT NULL, amount_cents BIGINT NOT NULL, status TEXT NOT NULL)"); err != nil {
				b.Fatal(err)
			}
			minimal := table + "_minimal"
			if _, err := pool.Exec(ctx, "CREATE TABLE "+minimal+" (id BIGSERIAL PRIMARY KEY, topic TEXT NOT NULL, event_key TEXT NOT NULL, payload BYTEA NOT NULL)"); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+orders+", "+minimal) })
			payload := []byte(`{"order_id":42,"customer":"c-7","amount_cents":1999,"status":"PAID"}`)

			const (
				plainTx     = iota // the business row alone
				outboxTx           // plus one outbox row (EnqueuePgxTx, a statement of its own)
				pipelinedTx        // plus one outbox row queued with the business row (EnqueueInBatch)
				controlTx          // plus a second business row: what any extra row costs
				minimalTx          // plus a minimal row in a second table: the floor
			)
			insertOrder := "INSERT INTO " + orders + " (customer, amount_cents, status) VALUES ($1, $2, 'PAID')"
			tx := func(kind int, i int64) error {
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if kind == pipelinedTx {
						b := &pgx.Batch{}
						b.Queue(insertOrder, "c-7", 1999)
						if err := st.EnqueueInBatch(b, outbox.Message{Topic: "orders", Key: fmt.Sprintf("order-%d", i), Type: "OrderPaid", Payload: payload}); err != nil {
							return err
						}
						return tx.SendBatch(ctx, b).Close()
					}
					if _, err := tx.Exec(ctx, insertOrder, "c-7", 1999); err != nil {
						return err
					}
					switch kind {
					case outboxTx:
						return st.EnqueuePgxTx(ctx, tx, outbox.Message{Topic: "orders", Key: fmt.Sprintf("order-%d", i), Type: "OrderPaid", Payload: payload})
					case controlTx:
						_, err := tx.Exec(ctx, "INSERT INTO "+orders+" (customer, amount_cents, status) VALUES ($1, $2, 'PAID')", "c-8", 2999)
						return err
					case minimalTx:
						_, err := tx.Exec(ctx, "INSERT INTO "+minimal+" (topic, event_key, payload) VALUES ($1, $2, $3)", "orders", fmt.Sprintf("order-%d", i), payload)
						return err
					}
					return nil
				})
			}
			// Alternate the variants round by round so drift in the shared
			// machine's load (fsync times vary widely here) hits all alike.
			var took [5]time.Duration
			const rounds = 6
			per := max(b.N/rounds, 1)
			b.ResetTimer()
			for round := 0; round < rounds; round++ {
				for kind := range took {
					took[kind] += runWriters(b, pool, per, func(i int64) error { return tx(kind, i) })
				}
			}
			b.StopTimer()
			n := float64(per * rounds)
			b.ReportMetric(n/took[plainTx].Seconds(), "tx/s-plain")
			b.ReportMetric(n/took[outboxTx].Seconds(), "tx/s-with-outbox")
			b.ReportMetric(100*(took[outboxTx].Seconds()/took[plainTx].Seconds()-1), "%outbox-row-cost")
			b.ReportMetric(100*(took[pipelinedTx].Seconds()/took[plainTx].Seconds()-1), "%outbox-row-in-batch-cost")
			b.ReportMetric(100*(took[controlTx].Seconds()/took[plainTx].Seconds()-1), "%second-business-row-cost")
			b.ReportMetric(100*(took[minimalTx].Seconds()/took[plainTx].Seconds()-1), "%minimal-second-table-row-cost")
		})
	}
}

// runWriters runs n transactions over `writers` goroutines.
func runWriters(b *testing.B, pool *pgxpool.Pool, n int, fn func(i int64) error) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if err := fn(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkEnqueueBatch1000 measures one Enqueue of 1,000 messages (one
// statement, one transaction).
func BenchmarkEnqueueBatch1000(b *testing.B) {
	pool, _ := openPool(b)
	ctx := context.Background()
	st, _ := migratedStore(b, pool, "bench_", pgstore.Config{})
	msgs := make([]outbox.Message, 1000)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "orders", Key: fmt.Sprintf("order-%d", i), Type: "OrderPaid", Payload: []byte(`{"order_id":42,"amount_cents":1999}`)}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := st.Enqueue(ctx, msgs...); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkNotifyInterval compares NotifyInterval settings in one run: the
// same one-row business transaction alone, with a second business row, and
// with one outbox row through stores notifying on every enqueue, coalesced
// at 1, 2 and 5 ms, and never, all alternating round by round. It reports
// each variant's cost over the business row alone.
func BenchmarkNotifyInterval(b *testing.B) {
	pool, _ := openPool(b)
	ctx := context.Background()
	variants := []struct {
		name string
		cfg  pgstore.Config
	}{
		{"every", pgstore.Config{NotifyInterval: -1}},
		{"1ms", pgstore.Config{NotifyInterval: time.Millisecond}},
		{"2ms", pgstore.Config{NotifyInterval: 2 * time.Millisecond}},
		{"5ms", pgstore.Config{NotifyInterval: 5 * time.Millisecond}},
		{"off", pgstore.Config{DisableNotify: true}},
	}
	stores := make([]*pgstore.Store, len(variants))
	for i, v := range variants {
		stores[i], _ = migratedStore(b, pool, "bench_", v.cfg)
	}
	orders := uniqueTable("bench_") + "_orders"
	if _, err := pool.Exec(ctx, "CREATE TABLE "+orders+" (id BIGSERIAL PRIMARY KEY, customer TEXT NOT NULL, amount_cents BIGINT NOT NULL, status TEXT NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+orders) })
	payload := []byte(`{"order_id":42,"customer":"c-7","amount_cents":1999,"status":"PAID"}`)
	insert := "INSERT INTO " + orders + " (customer, amount_cents, status) VALUES ($1, $2, 'PAID')"
	// kind 0: the business row alone; 1: plus a second one; 2+: plus an
	// outbox row through stores[kind-2].
	tx := func(kind int, i int64) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, insert, "c-7", 1999); err != nil {
				return err
			}
			switch kind {
			case 0:
				return nil
			case 1:
				_, err := tx.Exec(ctx, insert, "c-8", 2999)
				return err
			}
			return stores[kind-2].EnqueuePgxTx(ctx, tx, outbox.Message{Topic: "orders", Key: fmt.Sprintf("order-%d", i), Type: "OrderPaid", Payload: payload})
		})
	}
	took := make([]time.Duration, len(variants)+2)
	const per = 500 // transactions per variant and round: short rounds, so drift hits all alike
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
	b.ReportMetric(cost(took[1]), "%second-business-row")
	for i, v := range variants {
		b.ReportMetric(cost(took[i+2]), "%outbox-"+v.name)
	}
}

// BenchmarkContractCheckCost measures what each candidate CHECK constraint
// of the table contract costs a one-row business transaction that enqueues
// one event (EnqueuePgxTx, a statement of its own), 8 concurrent writers:
// the same transaction against one table without any and one table per
// candidate, alternating round by round, each reported as its cost in
// points over the table without checks ("none" runs twice, as the noise
// floor). Notifications are off in every variant, so only the constraint
// differs.
func BenchmarkContractCheckCost(b *testing.B) {
	pool, _ := openPool(b)
	ctx := context.Background()
	variants := contractCandidates
	stores := make([]*pgstore.Store, len(variants))
	for i, v := range variants {
		stores[i] = candidateStore(b, pool, pool, v.check)
	}
	orders := uniqueTable("bench_") + "_orders"
	if _, err := pool.Exec(ctx, "CREATE TABLE "+orders+" (id BIGSERIAL PRIMARY KEY, customer TEXT NOT NULL, amount_cents BIGINT NOT NULL, status TEXT NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+orders) })
	payload := []byte(`{"order_id":42,"customer":"c-7","amount_cents":1999,"status":"PAID"}`)
	insert := "INSERT INTO " + orders + " (customer, amount_cents, status) VALUES ($1, $2, 'PAID')"
	tx := func(kind int, i int64) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, insert, "c-7", 1999); err != nil {
				return err
			}
			return stores[kind].EnqueuePgxTx(ctx, tx, outbox.Message{Topic: "orders", Key: fmt.Sprintf("order-%d", i), Type: "OrderPaid", Payload: payload})
		})
	}
	took := make([]time.Duration, len(variants))
	const per = 250 // transactions per variant and round: short rounds, so drift hits all alike
	rounds := max(b.N/per, 1)
	b.ResetTimer()
	for round := 0; round < rounds; round++ {
		for k := range took {
			kind := (k + round) % len(took) // rotate who goes first
			took[kind] += runWriters(b, pool, per, func(i int64) error { return tx(kind, i) })
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(per*rounds)/took[0].Seconds(), "tx/s-none")
	for i, v := range variants[1:] {
		b.ReportMetric(100*(took[i+1].Seconds()/took[0].Seconds()-1), "%"+v.name)
	}
}

// BenchmarkContractCheckInsert isolates what BenchmarkContractCheckCost
// measures from the commit's flush, whose time varies widely on a shared
// machine: one writer enqueues one event per statement with
// synchronous_commit off, against the same candidate tables in alternating
// rounds, and it reports each candidate's extra time per INSERT in
// microseconds over the table without checks ("none-again" is the noise
// floor). Compare it with a one-row business transaction's time.
func BenchmarkContractCheckInsert(b *testing.B) {
	pool, _ := openPool(b)
	ctx := context.Background()
	pc := pool.Config().Copy()
	pc.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	pc.MaxConns = 1
	fast, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		b.Fatal(err)
	}
	defer fast.Close()
	variants := contractCandidates
	stores := make([]*pgstore.Store, len(variants))
	for i, v := range variants {
		stores[i] = candidateStore(b, pool, fast, v.check)
	}
	payload := []byte(`{"order_id":42,"customer":"c-7","amount_cents":1999,"status":"PAID"}`)
	took := make([]time.Duration, len(variants))
	const per = 200
	rounds := max(b.N/per, 1)
	b.ResetTimer()
	for round := 0; round < rounds; round++ {
		for k := range took {
			kind := (k + round) % len(took)
			start := time.Now()
			for i := 0; i < per; i++ {
				if err := stores[kind].Enqueue(ctx, outbox.Message{Topic: "orders", Key: fmt.Sprintf("order-%d", i), Type: "OrderPaid", Payload: payload}); err != nil {
					b.Fatal(err)
				}
			}
			took[kind] += time.Since(start)
		}
	}
	b.StopTimer()
	n := float64(per * rounds)
	b.ReportMetric(took[0].Seconds()/n*1e6, "µs/insert-none")
	for i, v := range variants[1:] {
		b.ReportMetric((took[i+1].Seconds()-took[0].Seconds())/n*1e6, "µs+"+v.name)
	}
}

// contractCandidates are the CHECK constraints the contract benchmarks
// compare; "none" twice, as the noise floor.
var contractCandidates = []struct{ name, check string }{
	{"none", ""},
	{"none-again", ""},
	{"status-in", "status IN ('NEW', 'SENDING', 'SENT', 'DEAD')"},
	{"status-new-dead", "status IN ('NEW', 'DEAD')"},
	{"event-type", "event_type <> ''"},
	{"schema-version", "schema_version >= 0"},
	{"headers-object", "jsonb_typeof(headers) = 'object'"},
	{"headers-strings", `jsonb_typeof(headers) = 'object' AND NOT jsonb_path_exists(headers, '$.* ? (@.type() != "string")')`},
	{"control-chars", `(topic || event_key || event_type) !~ '[\x01-\x1f\x7f-\x9f]'`},
	{"all-cheap", "status IN ('NEW', 'SENDING', 'SENT', 'DEAD') AND event_type <> '' AND schema_version >= 0 AND jsonb_typeof(headers) = 'object'"},
	{"all-cheap-separate", "status IN ('NEW', 'DEAD');event_type <> '';schema_version >= 0;jsonb_typeof(headers) = 'object';topic <> ''"},
}

// candidateStore is a Store over pool on a fresh migrated table (created
// through admin) with the CHECK check added, unless check is empty.
func candidateStore(b *testing.B, admin, pool *pgxpool.Pool, check string) *pgstore.Store {
	b.Helper()
	ctx := context.Background()
	_, table := migratedStore(b, admin, "bench_", pgstore.Config{DisableNotify: true})
	// The migrated table's own CHECKs go first: "none" has none.
	rows, err := admin.Query(ctx, "SELECT conname FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'c'", table)
	if err != nil {
		b.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range names {
		if _, err := admin.Exec(ctx, "ALTER TABLE "+table+" DROP CONSTRAINT "+pgx.Identifier{n}.Sanitize()); err != nil {
			b.Fatal(err)
		}
	}
	for i, c := range strings.Split(check, ";") { // one constraint each
		if c == "" {
			continue
		}
		if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s_candidate_%d CHECK (%s)", table, table, i, c)); err != nil {
			b.Fatal(err)
		}
	}
	st, err := pgstore.New(pool, pgstore.Config{DisableNotify: true, Options: store.Options{Table: table}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}
