package sqlitestore_test

import (
	"database/sql"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/sqlitestore"
	"github.com/outbox-go/outbox/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConformance gives every suite table a database file of its own in
// t.TempDir(). SQLite needs no server, so this never skips.
func TestConformance(t *testing.T) {
	conformance(t, "sqlite", func(t *testing.T, table string) string {
		return "sqlite:" + filepath.Join(t.TempDir(), table+".db")
	})
}

// TestConformanceMemory runs the suite on private in-memory databases
// (memdb, rollback journal instead of WAL).
func TestConformanceMemory(t *testing.T) {
	conformance(t, "sqlite-memory", func(*testing.T, string) string { return sqlitestore.MemoryURL })
}

func conformance(t *testing.T, name string, url func(t *testing.T, table string) string) {
	var mu sync.Mutex
	dbs := map[string]*sql.DB{} // table → the database Open made for it
	fallback, err := sqlitestore.Open(t.Context(), sqlitestore.MemoryURL, sqlitestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer fallback.Close()
	storetest.Run(t, storetest.Harness{
		Name:         name,
		SingleWriter: true,
		// New must reach the database of the table it is asked for: the
		// suite migrates one table from several stores at once.
		New: func(opts store.Options) (driver.Store, error) {
			mu.Lock()
			db := dbs[opts.Table]
			mu.Unlock()
			if db == nil {
				db = fallback.DB()
			}
			return sqlitestore.New(db, sqlitestore.Config{Options: opts})
		},
		Open: func(t *testing.T, opts store.Options) storetest.Fixture {
			st, err := sqlitestore.Open(t.Context(), url(t, opts.Table), sqlitestore.Config{Options: opts})
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			dbs[opts.Table] = st.DB()
			mu.Unlock()
			// The tables live and die with their database: closing the
			// store (which opened it) drops them.
			t.Cleanup(func() {
				mu.Lock()
				delete(dbs, opts.Table)
				mu.Unlock()
				st.Close()
			})
			return storetest.Fixture{Store: st, DB: st.DB(), Table: st.Table(), Placeholder: storetest.Question}
		},
	})
}

// TestNotifyAfterCallerCommit: an EnqueueTx in the caller's transaction
// wakes Notify once the caller commits, through PRAGMA data_version.
func TestNotifyAfterCallerCommit(t *testing.T) {
	t.Parallel()
	st, err := sqlitestore.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "n.db"), sqlitestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	ch := st.Notify(t.Context())
	drain := func() {
		for {
			select {
			case <-ch:
			case <-time.After(150 * time.Millisecond):
				return
			}
		}
	}
	drain() // the watcher's first look signals
	tx, err := st.DB().BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if err := st.EnqueueTx(t.Context(), tx, outbox.Message{Topic: "t", Type: "T"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Fatal("Notify signalled before the caller committed")
	case <-time.After(150 * time.Millisecond):
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(2 * time.Second):
		t.Fatal("Notify did not signal within 2s of the caller's commit")
	}
}

// TestEnqueueChunksAndOrder: a batch larger than one INSERT, mixing delayed
// and plain messages, is written atomically with ids in input order.
func TestEnqueueChunksAndOrder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := sqlitestore.Open(ctx, sqlitestore.MemoryURL, sqlitestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 7000
	msgs := make([]outbox.Message, n)
	past := time.Now().Add(-time.Hour)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "t", Type: strconv.Itoa(i)}
		if i > 4000 && i < 4100 {
			msgs[i].AvailableAt = past
		}
	}
	start := time.Now()
	if err := st.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("Enqueue of %d messages: %v", n, time.Since(start))
	own := balance(t, st, driver.BalanceParams{Owner: "r", LeaseFor: time.Minute})
	c, err := st.Claim(ctx, driver.ClaimParams{Lease: driver.Lease{Owner: "r", Epoch: 1}, Limit: n, Shards: own.Held})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Events) != n {
		t.Fatalf("claimed %d of %d", len(c.Events), n)
	}
	for i, ev := range c.Events {
		if ev.Type != strconv.Itoa(i) {
			t.Fatalf("event %d in id order is message %s", i, ev.Type)
		}
	}
	// One bad message in a later chunk: nothing of the batch is written.
	dup := msgs[:1]
	dup[0].EventID = c.Events[0].EventID
	big := append(make([]outbox.Message, 0, n+1), msgs[1:]...)
	for i := range big {
		big[i].EventID = ""
	}
	big = append(big, dup[0])
	if err := st.Enqueue(ctx, big...); err == nil {
		t.Fatal("Enqueue with a duplicate EventID in its last chunk succeeded")
	}
	if s, err := st.Stats(ctx); err != nil || s.Sending != n || s.New != 0 {
		t.Fatalf("Stats after a failed multi-chunk Enqueue: %+v, %v; want only the %d claimed", s, err, n)
	}
}
