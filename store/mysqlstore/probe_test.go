package mysqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/mysqlstore"
)

// A plain-SQL producer's transaction takes its id first and commits last:
// below an id already seen, after the row above it was delivered, and below
// a DEAD row that stays. No newest id changes; the probe's look at the
// pending rows finds it.
func TestProbeNoticesALateCommit(t *testing.T) {
	ctx := context.Background()
	db := plainDB(t)
	table := uniqueTable("probe_")
	dropTables(t, db, table)
	st, err := mysqlstore.New(db, mysqlstore.Config{Options: store.Options{Table: table, ProbeInterval: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ins := "INSERT INTO " + table + " (topic, event_key, event_type, payload) VALUES ('t', ?, 'T', '{}')"
	nctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := st.Notify(nctx)
	time.Sleep(100 * time.Millisecond)
	late, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback() //nolint:errcheck
	res, err := late.ExecContext(ctx, ins, "late")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := res.LastInsertId()
	var ids [2]int64
	for i := range ids {
		res, err := db.ExecContext(ctx, ins, "other")
		if err != nil {
			t.Fatal(err)
		}
		ids[i], _ = res.LastInsertId()
	}
	if _, err := db.ExecContext(ctx, "UPDATE "+table+" SET status = 'DEAD', last_error = 'poison' WHERE id = ?", ids[1]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch: // the probe has seen the newer rows
	case <-time.After(3 * time.Second):
		t.Fatal("no wake-up within 3 s of a commit")
	}
	if _, err := db.ExecContext(ctx, "DELETE FROM "+table+" WHERE id = ?", ids[0]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	for len(ch) > 0 {
		<-ch
	}
	if err := late.Commit(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case <-ch:
		t.Logf("id %d committed below DEAD id %d: woken %v after its commit", a, ids[1], time.Since(start).Round(time.Millisecond))
	case <-time.After(2 * time.Second):
		t.Fatalf("id %d committed 300 ms after id %d, below the DEAD id %d: no wake-up within 2 s", a, ids[0], ids[1])
	}
}
