package pollsource_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/source"
	"github.com/outbox-go/outbox/source/pollsource"
	"github.com/outbox-go/outbox/source/sourcetest"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/mysqlstore"
	"github.com/outbox-go/outbox/store/pgstore"
	"github.com/outbox-go/outbox/store/sqlitestore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func uniq(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

const leaseFor = time.Second

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// stallable is a store whose lease renewals can be stopped, as those of a
// process that hangs (SIGSTOP, a long GC pause, a cut network) stop.
type stallable struct {
	store.Store
	stalled atomic.Bool
}

func (s *stallable) Extend(ctx context.Context, lease store.Lease, ids []int64, d time.Duration) (time.Time, error) {
	if s.stalled.Load() {
		<-ctx.Done()
		return time.Time{}, ctx.Err()
	}
	return s.Store.Extend(ctx, lease, ids, d)
}

func (s *stallable) AckClaim(ctx context.Context, lease store.Lease, n int) error {
	return s.Store.(store.ClaimAcker).AckClaim(ctx, lease, n)
}

func (s *stallable) Notify(ctx context.Context) <-chan struct{} {
	return s.Store.(store.Notifier).Notify(ctx)
}

// fixture is one migrated outbox table.
type fixture struct {
	st    store.Store
	begin func(t testing.TB) sourcetest.Tx
	cur   *stallable
}

func (f *fixture) Open(t testing.TB) source.Source {
	t.Helper()
	f.cur = &stallable{Store: f.st}
	src, err := pollsource.New(f.cur, pollsource.Config{LeaseFor: leaseFor, PollInterval: 20 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

func (f *fixture) Close(t testing.TB, s source.Source) {
	t.Helper()
	if err := s.(*pollsource.Source).Close(); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) Begin(t testing.TB) sourcetest.Tx { return f.begin(t) }

func (f *fixture) Dead(t testing.TB) []sourcetest.Dead {
	t.Helper()
	recs, err := f.st.ListDead(context.Background(), store.DeadQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]sourcetest.Dead, len(recs))
	for i, r := range recs {
		out[i] = sourcetest.Dead{EventID: r.EventID, Reason: r.LastError}
	}
	return out
}

// Takeover stalls the open source's renewals and lets a successor claim
// its events once their leases ran out.
func (f *fixture) Takeover(t testing.TB, _ source.Source) {
	t.Helper()
	f.cur.stalled.Store(true)
	next, err := pollsource.New(f.st, pollsource.Config{Owner: uniq("successor-"), LeaseFor: time.Minute, PollInterval: 20 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { next.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	txns, err := next.Next(ctx)
	if err != nil {
		t.Fatalf("the successor claimed nothing after the stalled source's lease ran out: %v", err)
	}
	if len(txns) == 0 {
		t.Fatal("the successor's Next returned nothing")
	}
}

type sqlTx struct {
	st store.Store
	tx *sql.Tx
}

func (x sqlTx) Write(t testing.TB, msgs ...outbox.Message) {
	t.Helper()
	if err := x.st.EnqueueTx(context.Background(), x.tx, msgs...); err != nil {
		t.Fatal(err)
	}
}
func (x sqlTx) Commit(t testing.TB) {
	t.Helper()
	if err := x.tx.Commit(); err != nil {
		t.Fatal(err)
	}
}
func (x sqlTx) Rollback(t testing.TB) {
	t.Helper()
	if err := x.tx.Rollback(); err != nil {
		t.Fatal(err)
	}
}

func sqlBegin(st store.Store, db *sql.DB) func(t testing.TB) sourcetest.Tx {
	return func(t testing.TB) sourcetest.Tx {
		t.Helper()
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback() })
		return sqlTx{st: st, tx: tx}
	}
}

type pgxTx struct {
	st *pgstore.Store
	tx pgx.Tx
}

func (x pgxTx) Write(t testing.TB, msgs ...outbox.Message) {
	t.Helper()
	if err := x.st.EnqueuePgxTx(context.Background(), x.tx, msgs...); err != nil {
		t.Fatal(err)
	}
}
func (x pgxTx) Commit(t testing.TB) {
	t.Helper()
	if err := x.tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}
func (x pgxTx) Rollback(t testing.TB) {
	t.Helper()
	if err := x.tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func migrate(t testing.TB, st store.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestConformancePostgres(t *testing.T) {
	url := testenv.Require(t, testenv.Postgres)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(context.Background()); err != nil {
		testenv.Unavailable(t, testenv.Postgres, err)
	}
	sourcetest.Run(t, sourcetest.Suite{New: func(t *testing.T) sourcetest.Fixture {
		table := uniq("pollsrc_")
		st, err := pgstore.New(pool, pgstore.Config{Options: store.Options{Table: table}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			st.Close()
			for _, n := range pgstore.TableNames(table) {
				_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" CASCADE")
			}
		})
		migrate(t, st)
		return &fixture{st: st, begin: func(t testing.TB) sourcetest.Tx {
			t.Helper()
			tx, err := pool.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			return pgxTx{st: st, tx: tx}
		}}
	}})
}

func TestConformanceMySQL(t *testing.T) {
	url := testenv.Require(t, testenv.MySQL)
	base, err := mysqlstore.Open(context.Background(), url, mysqlstore.Config{})
	if err != nil {
		testenv.Unavailable(t, testenv.MySQL, err)
	}
	t.Cleanup(func() { base.Close() })
	db := base.DB()
	sourcetest.Run(t, sourcetest.Suite{New: func(t *testing.T) sourcetest.Fixture {
		table := uniq("pollsrc_")
		st, err := mysqlstore.New(db, mysqlstore.Config{Options: store.Options{Table: table}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			st.Close()
			for _, suffix := range []string{"", "_archive", "_migrations", "_claims", "_shards", "_relays"} {
				_, _ = db.Exec("DROP TABLE IF EXISTS `" + table + suffix + "`")
			}
		})
		migrate(t, st)
		return &fixture{st: st, begin: sqlBegin(st, db)}
	}})
}

func TestConformanceSQLite(t *testing.T) {
	sourcetest.Run(t, sourcetest.Suite{SingleWriter: true, New: func(t *testing.T) sourcetest.Fixture {
		st, err := sqlitestore.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "outbox.db"), sqlitestore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		migrate(t, st)
		return &fixture{st: st, begin: sqlBegin(st, st.DB())}
	}})
}

func TestConfigRefusesNegative(t *testing.T) {
	for _, c := range []pollsource.Config{{BatchSize: -1}, {LeaseFor: -time.Second}, {PollInterval: -1}, {LeaseFor: time.Millisecond}} {
		if _, err := pollsource.New(nil, c); err == nil {
			t.Errorf("New(nil, %+v): no error", c)
		}
		if _, err := c.WithDefaults(); err == nil {
			t.Errorf("WithDefaults(%+v): no error", c)
		}
	}
}

// Park of an event the Source did not hand out is refused with a reason,
// never a panic.
func TestParkUnknownEvent(t *testing.T) {
	st, err := sqlitestore.Open(context.Background(), sqlitestore.MemoryURL, sqlitestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	migrate(t, st)
	src, err := pollsource.New(st, pollsource.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	err = src.Park(context.Background(), []source.Parked{{Event: outbox.Event{ID: 42}, Reason: "x"}})
	if err == nil || errors.Is(err, source.ErrFenced) {
		t.Fatalf("Park of an unknown event: %v", err)
	}
}

// The delivery loop over the poller: every event delivered once, each
// key's in id order, a failing event retried and parked DEAD without
// holding its key, and the table left empty but for the DEAD one.
func TestLoopDelivers(t *testing.T) {
	st, err := sqlitestore.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "outbox.db"), sqlitestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	migrate(t, st)
	const n, keys = 600, 7
	var msgs []outbox.Message
	for i := range n {
		m := outbox.Message{Topic: "t", Key: string(rune('a' + i%keys)), Type: "T", Payload: []byte{byte(i >> 8), byte(i)}}
		if i == 100 {
			m.Type = "poison"
		}
		msgs = append(msgs, m)
	}
	if err := st.Enqueue(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	b, err := membroker.New(membroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b.SetHook(func(e outbox.Event) error {
		if e.Type == "poison" {
			return errors.New("refused")
		}
		return nil
	})
	src, err := pollsource.New(st, pollsource.Config{BatchSize: 50, LeaseFor: 5 * time.Second, PollInterval: 20 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	loop, err := source.New(src, b, source.Config{MaxAttempts: 3, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	got, err := b.Wait(wctx, "t", n-1)
	if err != nil {
		s, _ := st.Stats(context.Background())
		select {
		case e := <-done:
			t.Fatalf("%v; the loop stopped: %v; totals %+v; table %+v", err, e, loop.Totals(), s)
		default:
		}
		t.Fatalf("%v; totals %+v; table %+v", err, loop.Totals(), s)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := st.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s.Pending() == 0 && s.Dead == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the table still holds %+v; want only the DEAD event", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	last := map[string]int64{}
	seen := map[int64]bool{}
	for _, e := range got {
		if seen[e.ID] {
			t.Fatalf("event %d delivered twice", e.ID)
		}
		seen[e.ID] = true
		if e.ID < last[e.Key] {
			t.Fatalf("key %s: event %d after %d", e.Key, e.ID, last[e.Key])
		}
		last[e.Key] = e.ID
	}
	if tot := loop.Totals(); tot.Delivered != n-1 || tot.Dead != 1 {
		t.Fatalf("totals %+v", tot)
	}
}
