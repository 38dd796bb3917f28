package pgstore_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/pgstore"
)

// notifyFixture is a migrated store and a connection listening on its
// table's channel.
type notifyFixture struct {
	pool   *pgxpool.Pool
	st     *pgstore.Store
	listen *pgx.Conn
}

func newNotifyFixture(t *testing.T, cfg pgstore.Config) notifyFixture {
	t.Helper()
	pool, _ := openPool(t)
	ctx := context.Background()
	st, table := migratedStore(t, pool, "notify_", cfg)
	conn, err := pgx.Connect(ctx, testenv.Require(t, testenv.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	// The channel is "<schema>.<table>_events"; the schema is empty here.
	channel := "." + table + "_events"
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return notifyFixture{pool: pool, st: st, listen: conn}
}

// enqueue commits one business-style transaction with one outbox row and
// returns the times just before and just after EnqueuePgxTx: the store
// decides whether to notify in between.
func (f notifyFixture) enqueue(t *testing.T, key string) (before, after time.Time) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		before = time.Now()
		err := f.st.EnqueuePgxTx(ctx, tx, outbox.Message{Topic: "orders", Key: key, Type: "OrderPaid", Payload: []byte(`{}`)})
		after = time.Now()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return before, after
}

// count returns how many notifications arrive within d, stopping early once
// it has want of them and no more arrive within a short grace.
func (f notifyFixture) count(t *testing.T, d time.Duration, want int) int {
	t.Helper()
	n := 0
	deadline := time.Now().Add(d)
	for {
		wait := time.Until(deadline)
		if n >= want {
			wait = min(wait, 100*time.Millisecond) // anything more would be a surplus
		}
		if wait <= 0 {
			return n
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		_, err := f.listen.WaitForNotification(ctx)
		cancel()
		switch {
		case err == nil:
			n++
		case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
			return n
		default:
			t.Fatal(err)
		}
	}
}

// A lone enqueue notifies at once; the enqueues inside the window do not;
// the first one after the window notifies again.
func TestNotifyCoalescing(t *testing.T) {
	const window = 500 * time.Millisecond
	f := newNotifyFixture(t, pgstore.Config{NotifyInterval: window})

	before, after := f.enqueue(t, "k-0")
	committed := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := f.listen.WaitForNotification(ctx)
	cancel()
	if err != nil {
		t.Fatalf("a lone enqueue sent no notification: %v", err)
	}
	// At once: long before any poll or the window's end, even under -race.
	if d := time.Since(committed); d > window/2 {
		t.Errorf("a lone enqueue's notification came %v after the commit; want it at once", d)
	} else {
		t.Logf("a lone enqueue's notification came %v after the commit", d)
	}
	if n := f.count(t, 100*time.Millisecond, 0); n != 0 {
		t.Errorf("a lone enqueue sent %d notifications more; want 1 in all", n)
	}

	// A burst from 8 goroutines on the same Store, as the benchmark does.
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3; i++ {
				f.enqueue(t, "k-burst")
			}
		}()
	}
	wg.Wait()
	burst := time.Since(before) // an upper bound on how far into the window it went
	n := f.count(t, 200*time.Millisecond, 0)
	switch {
	case burst < window && n != 0:
		t.Errorf("24 enqueues within %v of a notifying one (window %v) sent %d notifications; want 0", burst, window, n)
	case n > int(burst/window):
		t.Errorf("24 enqueues over %v (window %v) sent %d notifications; want at most %d", burst, window, n, int(burst/window))
	}

	time.Sleep(time.Until(after.Add(window + 10*time.Millisecond)))
	f.enqueue(t, "k-1")
	if n := f.count(t, 2*time.Second, 1); n != 1 {
		t.Errorf("the first enqueue after the window sent %d notifications; want 1", n)
	}
}

// A negative NotifyInterval notifies on every enqueue; DisableNotify never.
func TestNotifyIntervalNegativeAndDisabled(t *testing.T) {
	t.Run("negative", func(t *testing.T) {
		f := newNotifyFixture(t, pgstore.Config{NotifyInterval: -1})
		for i := 0; i < 3; i++ {
			f.enqueue(t, "k")
		}
		if n := f.count(t, 2*time.Second, 3); n != 3 {
			t.Errorf("3 enqueues with NotifyInterval < 0 sent %d notifications; want 3", n)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		f := newNotifyFixture(t, pgstore.Config{DisableNotify: true, NotifyInterval: -1})
		f.enqueue(t, "k")
		if err := f.st.Enqueue(context.Background(), outbox.Message{Topic: "t", Type: "T"}, outbox.Message{Topic: "t", Type: "T"}); err != nil {
			t.Fatal(err)
		}
		if n := f.count(t, 300*time.Millisecond, 0); n != 0 {
			t.Errorf("enqueues with DisableNotify sent %d notifications; want 0", n)
		}
	})
	t.Run("batch", func(t *testing.T) {
		f := newNotifyFixture(t, pgstore.Config{})
		msgs := []outbox.Message{{Topic: "t", Type: "T"}, {Topic: "t", Type: "T", Headers: map[string]string{"h": "v"}}}
		if err := f.st.Enqueue(context.Background(), msgs...); err != nil {
			t.Fatal(err)
		}
		if n := f.count(t, 2*time.Second, 1); n != 1 {
			t.Errorf("a lone batch enqueue sent %d notifications; want 1", n)
		}
	})
}

// The lean single-row statement and the general multi-row one store the
// same things, through both pgx and database/sql.
func TestEnqueueShapes(t *testing.T) {
	pool, db := openPool(t)
	ctx := context.Background()
	st, _ := migratedStore(t, pool, "shapes_", pgstore.Config{})
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	lone := outbox.Message{EventID: outbox.NewEventID(), Topic: "orders", Key: "o-1", Type: "OrderPaid", AggregateType: "Order", SchemaVersion: 3, Payload: []byte(`{"id":1}`), ContentType: "application/x"}
	bare := outbox.Message{Topic: "bare", Type: "Bare"}
	full := outbox.Message{Topic: "full", Key: "o-2", Type: "Full", Headers: map[string]string{"trace": "abc"}, AvailableAt: later}
	write := map[string]func(...outbox.Message) error{
		"pgx": func(msgs ...outbox.Message) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return st.EnqueuePgxTx(ctx, tx, msgs...) })
		},
		"sql": func(msgs ...outbox.Message) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := st.EnqueueTx(ctx, tx, msgs...); err != nil {
				return err
			}
			return tx.Commit()
		},
		"batch": func(msgs ...outbox.Message) error {
			b := &pgx.Batch{}
			if err := st.EnqueueInBatch(b, msgs...); err != nil {
				return err
			}
			return pool.SendBatch(ctx, b).Close()
		},
	}
	for name, w := range write {
		for _, msgs := range [][]outbox.Message{{lone}, {bare}, {full}, {bare, full, lone}} {
			msgs = slices.Clone(msgs) // a given event id must be new each time
			for i := range msgs {
				if msgs[i].EventID != "" {
					msgs[i].EventID = outbox.NewEventID()
				}
			}
			if err := w(msgs...); err != nil {
				t.Fatalf("%s: enqueue %d: %v", name, len(msgs), err)
			}
		}
	}
	rows, err := pool.Query(ctx, "SELECT id, headers::text, next_attempt_at > created_at FROM "+st.Table()+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		id      int64
		headers string
		delayed bool
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.id, &x.headers, &x.delayed)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []outbox.Message{lone, bare, full, bare, full, lone}
	if len(got) != len(write)*len(want) {
		t.Fatalf("%d rows; want %d", len(got), len(write)*len(want))
	}
	for i, r := range got {
		m := want[i%len(want)]
		rec, err := st.Get(ctx, r.id)
		if err != nil {
			t.Fatal(err)
		}
		n := m.Normalized()
		if len(rec.EventID) != 36 {
			t.Errorf("row %d: EventID %q; want a UUID", i, rec.EventID)
		}
		if rec.Topic != n.Topic || rec.Key != n.Key || rec.Type != n.Type || rec.AggregateType != n.AggregateType ||
			rec.SchemaVersion != n.SchemaVersion || string(rec.Payload) != string(n.Payload) || rec.ContentType != n.ContentType ||
			!maps.Equal(rec.Headers, n.Headers) {
			t.Errorf("row %d: stored %+v; want %+v", i, rec.Message, n)
		}
		if len(m.Headers) == 0 && r.headers != "{}" {
			t.Errorf("row %d: headers column %s; want {}", i, r.headers)
		}
		if r.delayed != !m.AvailableAt.IsZero() {
			t.Errorf("row %d: next_attempt_at > created_at is %v; want %v", i, r.delayed, !m.AvailableAt.IsZero())
		}
		if !m.AvailableAt.IsZero() && !rec.NextAttemptAt.Equal(later) {
			t.Errorf("row %d: NextAttemptAt %v; want %v", i, rec.NextAttemptAt, later)
		}
	}
}

// TestEnqueueInBatchIsAtomic checks that rows queued on a batch commit with
// the batch's other statements or not at all, and that a message refused by
// validation queues nothing.
func TestEnqueueInBatchIsAtomic(t *testing.T) {
	pool, _ := openPool(t)
	ctx := context.Background()
	st, _ := migratedStore(t, pool, "inbatch_", pgstore.Config{})
	count := func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+st.Table()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	msg := outbox.Message{Topic: "orders", Key: "o-1", Type: "OrderPaid", Payload: []byte(`{}`)}

	// An implicit transaction: a later statement fails, so the row is gone.
	b := &pgx.Batch{}
	if err := st.EnqueueInBatch(b, msg); err != nil {
		t.Fatal(err)
	}
	b.Queue("SELECT 1/0")
	if err := pool.SendBatch(ctx, b).Close(); err == nil {
		t.Fatal("a batch with 1/0 succeeded")
	}
	if n := count(); n != 0 {
		t.Fatalf("%d rows after the batch failed; want 0", n)
	}

	// Inside the caller's transaction, rolled back.
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		if err := st.EnqueueInBatch(b, msg, msg); err != nil {
			return err
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		return errors.New("business rule says no")
	})
	if err == nil || count() != 0 {
		t.Fatalf("rolled back: err %v, %d rows; want an error and 0 rows", err, count())
	}

	// Committed: claimable like any other row.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		if err := st.EnqueueInBatch(b, msg); err != nil {
			return err
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	c := claimAll(t, st, driver.ClaimParams{Lease: driver.Lease{Owner: "t", Epoch: 1}, Limit: 10, LeaseFor: time.Minute})
	if len(c.Events) != 1 || c.Events[0].Key != "o-1" {
		t.Fatalf("claim: %d events; want the one committed", len(c.Events))
	}

	// Refused by validation: nothing queued.
	b = &pgx.Batch{}
	if err := st.EnqueueInBatch(b, msg, outbox.Message{}); !errors.Is(err, outbox.ErrEmptyTopic) {
		t.Fatalf("empty topic: %v; want ErrEmptyTopic", err)
	}
	if b.Len() != 0 {
		t.Fatalf("%d statements queued after a validation error; want 0", b.Len())
	}
	if err := st.EnqueueInBatch(nil, msg); err == nil {
		t.Fatal("a nil batch was accepted")
	}
}
