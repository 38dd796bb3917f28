package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
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

// BenchmarkContractCheckCPU measures what BenchmarkContractCheckCost cannot
// resolve on a shared machine (its noise is several points): the database
// CPU each candidate CHECK adds to a one-row business transaction that
// enqueues one event. One connection runs the transactions of every
// candidate table in alternating rounds, and the backend's own CPU time is
// read from /proc/<pid>/schedstat around each round (time on a CPU, not time
// waiting for it or for the WAL flush), so other load on the machine hardly
// matters. It reports the backend CPU per transaction without checks and each
// candidate's extra CPU in percent of it ("none-again" is the noise floor).
// The server must run on this machine.
func BenchmarkContractCheckCPU(b *testing.B) {
	pool, _ := openPool(b)
	ctx := context.Background()
	one, pid, backendCPU := oneBackend(b, pool)
	var variants []struct{ name, check string }
	for _, v := range contractCandidates { // the finalists of BenchmarkContractCheckLoop
		switch v.name {
		case "none", "none-again", "check-status", "check-cheap-rules", "domain-cheap-rules":
			variants = append(variants, v)
		}
	}
	stores := make([]*pgstore.Store, len(variants))
	for i, v := range variants {
		stores[i] = candidateStore(b, pool, one, v.check)
	}
	orders := uniqueTable("bench_") + "_orders"
	if _, err := pool.Exec(ctx, "CREATE TABLE "+orders+" (id BIGSERIAL PRIMARY KEY, customer TEXT NOT NULL, amount_cents BIGINT NOT NULL, status TEXT NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+orders) })
	payload := []byte(`{"order_id":42,"customer":"c-7","amount_cents":1999,"status":"PAID"}`)
	insert := "INSERT INTO " + orders + " (customer, amount_cents, status) VALUES ($1, $2, 'PAID')"
	spent := make([]time.Duration, len(variants))
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
					return stores[kind].EnqueuePgxTx(ctx, tx, outbox.Message{Topic: "orders", Key: "order-" + strconv.Itoa(i), Type: "OrderPaid", Payload: payload})
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			spent[kind] += backendCPU() - before
		}
	}
	b.StopTimer()
	var after int
	if err := one.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&after); err != nil || after != pid {
		b.Fatalf("the connection changed backend (%d, then %d, %v): the CPU times are not one backend's", pid, after, err)
	}
	n := float64(per * rounds)
	b.ReportMetric(spent[0].Seconds()/n*1e6, "µs-cpu/tx-none")
	for i, v := range variants[1:] {
		b.ReportMetric(100*(spent[i+1].Seconds()/spent[0].Seconds()-1), "%cpu+"+v.name)
	}
}

// BenchmarkContractCheckLoop narrows BenchmarkContractCheckCPU down to the
// statement the CHECKs sit on: one PL/pgSQL loop per candidate and round runs
// 2,000 one-row INSERTs of the outbox's own shape (each its own statement,
// so the executor prepares the table's CHECK expressions 2,000 times, as for
// 2,000 one-row enqueues), and the backend's CPU time is read around it. It
// reports the CPU per INSERT without checks and each candidate's extra CPU
// per INSERT in nanoseconds ("none-again" is the noise floor).
func BenchmarkContractCheckLoop(b *testing.B) {
	pool, _ := openPool(b)
	ctx := context.Background()
	one, _, backendCPU := oneBackend(b, pool)
	variants := contractCandidates
	loops := make([]string, len(variants))
	for i, v := range variants {
		st := candidateStore(b, pool, one, v.check)
		loops[i] = `DO $$ BEGIN FOR i IN 1..2000 LOOP
	INSERT INTO ` + st.Table() + ` (event_id, topic, event_key, event_type, aggregate_type, schema_version, payload, content_type, headers, next_attempt_at)
	VALUES (gen_random_uuid(), 'orders', 'order-' || i, 'OrderPaid', '', 1, '\x7b7d', 'application/json', '{}', now());
END LOOP; END $$`
	}
	spent := make([]time.Duration, len(variants))
	rounds := max(b.N/2000, 1)
	b.ResetTimer()
	for round := 0; round < rounds; round++ {
		for k := range spent {
			kind := (k + round) % len(spent)
			before := backendCPU()
			if _, err := one.Exec(ctx, loops[kind]); err != nil {
				b.Fatal(err)
			}
			spent[kind] += backendCPU() - before
		}
	}
	b.StopTimer()
	n := float64(2000 * rounds)
	b.ReportMetric(spent[0].Seconds()/n*1e9, "ns-cpu/insert-none")
	for i, v := range variants[1:] {
		b.ReportMetric((spent[i+1].Seconds()-spent[0].Seconds())/n*1e9, "ns+"+v.name)
	}
}

// contractCandidates are the CHECK constraints the contract benchmarks
// compare; "none" twice, as the noise floor.
var contractCandidates = []struct{ name, check string }{
	{"none", ""},
	{"none-again", ""},
	// table CHECKs: on status alone, and the cheap rules
	{"check-status", "status IN ('NEW', 'SENDING', 'DEAD')"},
	{"check-cheap-rules", "status IN ('NEW', 'DEAD');topic <> '';schema_version >= 0;jsonb_typeof(headers) = 'object';event_type <> ''"},
	// the same rules as domains (a "domain:column=expression" each)
	{"domain-status", "domain:status=VALUE IN ('NEW', 'DEAD')"},
	{"domain-headers-object", "domain:headers=jsonb_typeof(VALUE) = 'object'"},
	{"domain-headers-strings", `domain:headers=jsonb_typeof(VALUE) = 'object' AND NOT jsonb_path_exists(VALUE, '$.* ? (@.type() != "string")')`},
	{"domain-schema-version", "domain:schema_version=VALUE >= 0"},
	{"domain-topic-not-empty", "domain:topic=VALUE <> ''"},
	{"domain-event-type-not-empty", "domain:event_type=VALUE <> ''"},
	{"domain-control-chars", `domain:topic=VALUE !~ '[\x01-\x1f\x7f-\x9f]';domain:event_type=VALUE !~ '[\x01-\x1f\x7f-\x9f]'`},
	{"domain-cheap-rules", "domain:status=VALUE IN ('NEW', 'DEAD');domain:headers=jsonb_typeof(VALUE) = 'object';domain:schema_version=VALUE >= 0;domain:topic=VALUE <> '';domain:event_type=VALUE <> ''"},
}

// candidateStore is a Store over pool on a fresh migrated table (created
// through admin) with the CHECK check added, unless check is empty.
func candidateStore(b *testing.B, admin, pool *pgxpool.Pool, check string) *pgstore.Store {
	b.Helper()
	ctx := context.Background()
	_, table := migratedStore(b, admin, "bench_", pgstore.Config{DisableNotify: true})
	// The migrated table's own CHECKs and domains go first: "none" has none.
	if _, err := admin.Exec(ctx, "ALTER TABLE "+table+" ALTER COLUMN status TYPE VARCHAR(8), ALTER COLUMN topic TYPE VARCHAR(255), ALTER COLUMN event_type TYPE VARCHAR(255), ALTER COLUMN schema_version TYPE INTEGER, ALTER COLUMN headers TYPE JSONB"); err != nil {
		b.Fatal(err)
	}
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
		sqls := []string{fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s_candidate_%d CHECK (%s)", table, table, i, c)}
		if col, expr, ok := strings.Cut(strings.TrimPrefix(c, "domain:"), "="); ok && strings.HasPrefix(c, "domain:") {
			// a domain over the column's type, the way a migration could
			// add it: no constraint while the column changes type (no
			// rewrite, no scan), then a NOT VALID CHECK on the domain
			var typ string
			if err := admin.QueryRow(ctx, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2", table, col).Scan(&typ); err != nil {
				b.Fatal(err)
			}
			domain := fmt.Sprintf("%s_%s_d", table, col)
			sqls = []string{
				"CREATE DOMAIN " + domain + " AS " + typ,
				"ALTER TABLE " + table + " ALTER COLUMN " + col + " TYPE " + domain,
				"ALTER DOMAIN " + domain + " ADD CONSTRAINT " + domain + "_check CHECK (" + expr + ") NOT VALID",
			}
			b.Cleanup(func() { admin.Exec(context.Background(), "DROP DOMAIN IF EXISTS "+domain+" CASCADE") })
		}
		for _, q := range sqls {
			if _, err := admin.Exec(ctx, q); err != nil {
				b.Fatalf("%s: %v", q, err)
			}
		}
	}
	st, err := pgstore.New(pool, pgstore.Config{DisableNotify: true, Options: store.Options{Table: table}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// oneBackend returns a pool of one connection over pool's database, its
// backend's pid, and a reader of that backend's CPU time from
// /proc/<pid>/schedstat (time on a CPU, not waiting), for benchmarks that
// measure the database's own cost. It skips when the server is elsewhere.
func oneBackend(b *testing.B, pool *pgxpool.Pool) (*pgxpool.Pool, int, func() time.Duration) {
	b.Helper()
	ctx := context.Background()
	pc := pool.Config().Copy()
	pc.MaxConns = 1
	one, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(one.Close)
	var pid int
	if err := one.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		b.Fatal(err)
	}
	cpu := func() time.Duration {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			b.Skipf("the backend's CPU time is not readable (is the server on this machine?): %v", err)
		}
		ns, err := strconv.ParseInt(strings.Fields(string(raw))[0], 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		return time.Duration(ns)
	}
	cpu()
	return one, pid, cpu
}
