package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/pgstore"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// PostgreSQL backends of the relay are terminated again and again while it
// works: claims, acks and the LISTEN connection fail, and the relay must
// recover by itself with nothing lost and order intact.
func TestPostgresBackendsTerminatedMidBatch(t *testing.T) {
	url := teststores.URL(t, "postgres")
	opts := store.Options{Table: teststores.UniqueTable("rt_")}
	app := "outbox_relay_fault_test_" + opts.Table // this test's backends only
	ctx := context.Background()
	st, err := pgstore.Open(ctx, url+"&application_name="+app, pgstore.Config{Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(); teststores.Drop(t, "postgres", url, opts.Table) })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	admin := teststores.SQLDB(t, "postgres", url)
	mb := newMem(t, membroker.Config{Latency: 10 * time.Millisecond})
	msgs := workload(t, st, "t", 3000, 30)
	cfg := fastConfig()
	cfg.BatchSize = 50
	r, _ := run(t, st, mb, cfg)
	killed := 0
	for i := 0; i < 15; i++ {
		time.Sleep(150 * time.Millisecond)
		var n int
		if err := admin.QueryRowContext(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		killed += n
	}
	if killed == 0 {
		t.Fatal("no backend was terminated: the test did not test anything")
	}
	observer, err := pgstore.Open(ctx, url, pgstore.Config{Options: opts}) // not terminated
	if err != nil {
		t.Fatal(err)
	}
	defer observer.Close()
	waitFor(t, "recovery and full delivery", 60*time.Second, func() bool { return pending(t, observer).Pending() == 0 })
	checkDelivered(t, msgs, mb.Events("t"))
	t.Logf("terminated %d backends; relay delivered %d, retried %d", killed, r.Totals().Delivered.Load(), r.Totals().Retried.Load())
}
