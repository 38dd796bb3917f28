// Package inboxtest is the conformance suite of package inbox: the same
// checks on every database. Each database's test file builds a Harness and
// calls Run and RunConcurrent.
//
// Every check works on tables of its own (random names), dropped when it
// ends, so the checks run in parallel and repeat with -count.
package inboxtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-go/outbox/inbox"
)

// Harness is what a database gives the suite.
type Harness struct {
	// Name is printed in logs: "postgres", "mysql", "sqlite".
	Name string
	// Open returns a new, separate pool on the shared test database and
	// registers its Close with t.Cleanup. The suite calls it more than
	// once in a test to stand for several consumer instances. SQLite pools
	// need a busy timeout so writers wait for each other. Required.
	Open func(t testing.TB) *sql.DB
	// Dialect is passed to inbox.Config; zero detects it from the driver.
	Dialect inbox.Dialect
}

// Run runs the functional checks against h, in parallel subtests.
func Run(t *testing.T, h Harness) {
	t.Helper()
	s := newSuite(t, h)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"ProcessedOnceThenDuplicate", s.testProcessedOnce},
		{"PerConsumer", s.testPerConsumer},
		{"EventIDCanonicalForm", s.testCanonicalID},
		{"HandlerErrorRecordsNothing", s.testHandlerError},
		{"HandlerPanicRecordsNothing", s.testHandlerPanic},
		{"HandleTx", s.testHandleTx},
		{"InvalidInput", s.testInvalidInput},
		{"NotMigrated", s.testNotMigrated},
		{"InvalidConfig", s.testInvalidConfig},
		{"MigrateIdempotentAndConcurrent", s.testMigrateConcurrent},
		{"Purge", s.testPurge},
		{"CheckVersion", s.testCheckVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

// RunConcurrent checks that an event delivered to two consumer instances
// at once (two pools, so two connections) has its effects applied exactly
// once, also when the first attempt fails. It is kept apart from Run so it
// can be repeated alone: go test -run Concurrent -count=100.
func RunConcurrent(t *testing.T, h Harness) {
	t.Helper()
	s := newSuite(t, h)
	c := s.newConcurrentFixture(t)
	t.Run("BothSucceed", func(t *testing.T) { c.run(t, false) })
	t.Run("FirstAttemptFails", func(t *testing.T) { c.run(t, true) })
	if s.dialect() != inbox.SQLite {
		// Under SERIALIZABLE a racing duplicate may surface as a
		// serialization failure (PostgreSQL), which Handle retries.
		cfg := c.cfg
		cfg.TxOptions = &sql.TxOptions{Isolation: sql.LevelSerializable}
		for i := range c.instances {
			in, err := inbox.New(c.instances[i].DB(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			c.instances[i] = in
		}
		t.Run("Serializable", func(t *testing.T) { c.run(t, false) })
	}
}

type suite struct{ h Harness }

// newSuite checks h and settles the dialect before subtests share it.
func newSuite(t *testing.T, h Harness) *suite {
	t.Helper()
	if h.Open == nil {
		t.Fatal("inboxtest: Harness.Open is nil; it must return a pool on the test database")
	}
	if h.Dialect == inbox.Detect {
		in, err := inbox.New(h.Open(t), inbox.Config{})
		if err != nil {
			t.Fatalf("inboxtest: %v; set Harness.Dialect", err)
		}
		h.Dialect = in.Dialect()
	}
	return &suite{h: h}
}

// fixture is one inbox over fresh tables, with a business table beside it.
type fixture struct {
	s   *suite
	db  *sql.DB
	in  *inbox.Inbox
	biz string // quoted business table: (event_id, consumer, note)
	cfg inbox.Config
}

func randomName(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func (s *suite) ph(n int) string {
	if s.dialect() == inbox.Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

func (s *suite) dialect() inbox.Dialect { return s.h.Dialect }

func (s *suite) quote(name string) string {
	if s.dialect() == inbox.MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

// newFixture opens a pool, creates an inbox over a fresh table and migrates
// it, and creates a business table. Everything is dropped at cleanup.
func (s *suite) newFixture(t *testing.T) *fixture {
	t.Helper()
	f := s.newInbox(t)
	bizName := randomName("biz_")
	f.biz = s.quote(bizName)
	f.exec(t, "CREATE TABLE "+f.biz+" (event_id VARCHAR(36) NOT NULL, consumer VARCHAR(100) NOT NULL, note VARCHAR(100) NOT NULL)")
	f.dropLater(t, f.biz)
	return f
}

// newInbox is newFixture without the business table.
func (s *suite) newInbox(t *testing.T) *fixture {
	t.Helper()
	db := s.h.Open(t)
	cfg := inbox.Config{Table: randomName("ibx_"), Dialect: s.h.Dialect}
	in, err := inbox.New(db, cfg)
	if err != nil {
		t.Fatalf("inbox.New: %v", err)
	}
	f := &fixture{s: s, db: db, in: in, cfg: cfg}
	f.dropLater(t, in.Table(), in.VersionsTable())
	if err := in.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return f
}

func (f *fixture) dropLater(t *testing.T, tables ...string) {
	db := f.db
	t.Cleanup(func() {
		for _, tbl := range tables {
			if _, err := db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+tbl); err != nil {
				t.Logf("cleanup: drop %s: %v", tbl, err)
			}
		}
	})
}

func (f *fixture) exec(t testing.TB, q string, args ...any) {
	t.Helper()
	if _, err := f.db.ExecContext(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func (f *fixture) count(t testing.TB, table, where string, args ...any) int {
	t.Helper()
	q := "SELECT COUNT(*) FROM " + table
	if where != "" {
		q += " WHERE " + where
	}
	var n int
	if err := f.db.QueryRowContext(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// inboxRows counts the inbox records of consumer (all consumers if empty).
func (f *fixture) inboxRows(t testing.TB, consumer string) int {
	if consumer == "" {
		return f.count(t, f.in.Table(), "")
	}
	return f.count(t, f.in.Table(), "consumer = "+f.s.ph(1), consumer)
}

// writeBiz is a handler body: one business row for the event.
func (f *fixture) writeBiz(consumer string, msg inbox.Message, note string) inbox.HandlerFunc {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO "+f.biz+" (event_id, consumer, note) VALUES ("+f.s.ph(1)+", "+f.s.ph(2)+", "+f.s.ph(3)+")", msg.EventID, consumer, note)
		return err
	}
}

func newMessage() inbox.Message {
	return inbox.Message{EventID: uuid.Must(uuid.NewV7()).String(), Type: "OrderPaid", Key: "order-" + randomName(""), Payload: []byte(`{"id":42}`)}
}

func (f *fixture) handle(t testing.TB, consumer string, msg inbox.Message, fn inbox.HandlerFunc) (inbox.Result, error) {
	t.Helper()
	return f.in.Handle(context.Background(), consumer, msg, fn)
}

func mustResult(t testing.TB, got inbox.Result, err error, want inbox.Result) {
	t.Helper()
	if err != nil || got != want {
		t.Fatalf("Handle = %v, %v; want %v, nil", got, err, want)
	}
}

func (s *suite) testProcessedOnce(t *testing.T) {
	f := s.newFixture(t)
	msg := newMessage()
	runs := 0
	fn := func(ctx context.Context, tx *sql.Tx) error {
		runs++
		return f.writeBiz("points", msg, "first")(ctx, tx)
	}
	r, err := f.handle(t, "points", msg, fn)
	mustResult(t, r, err, inbox.Processed)
	for i := 0; i < 3; i++ {
		r, err = f.handle(t, "points", msg, fn)
		mustResult(t, r, err, inbox.Duplicate)
	}
	if runs != 1 {
		t.Errorf("handler ran %d times, want 1", runs)
	}
	if n := f.count(t, f.biz, ""); n != 1 {
		t.Errorf("business rows = %d, want 1", n)
	}
	var typ, key string
	err = f.db.QueryRow("SELECT event_type, event_key FROM "+f.in.Table()+" WHERE consumer = "+s.ph(1)+" AND event_id = "+s.ph(2), "points", msg.EventID).Scan(&typ, &key)
	if err != nil || typ != msg.Type || key != msg.Key {
		t.Errorf("inbox record = (%q, %q), %v; want (%q, %q)", typ, key, err, msg.Type, msg.Key)
	}
	// A second instance (another pool) sees the same record.
	other, err := inbox.New(s.h.Open(t), f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err = other.Handle(context.Background(), "points", msg, fn)
	mustResult(t, r, err, inbox.Duplicate)
}

func (s *suite) testPerConsumer(t *testing.T) {
	f := s.newFixture(t)
	msg := newMessage()
	for _, c := range []string{"points", "shipping", "notifications", "Points", "通知服务"} {
		r, err := f.handle(t, c, msg, f.writeBiz(c, msg, "x"))
		mustResult(t, r, err, inbox.Processed)
	}
	for _, c := range []string{"points", "shipping", "通知服务"} {
		r, err := f.handle(t, c, msg, f.writeBiz(c, msg, "again"))
		mustResult(t, r, err, inbox.Duplicate)
	}
	if n := f.count(t, f.biz, ""); n != 5 {
		t.Errorf("business rows = %d, want 5 (one per consumer)", n)
	}
}

func (s *suite) testCanonicalID(t *testing.T) {
	f := s.newFixture(t)
	id := uuid.Must(uuid.NewV7())
	forms := []string{id.String(), strings.ToUpper(id.String()), "urn:uuid:" + id.String(), "{" + id.String() + "}", strings.ReplaceAll(id.String(), "-", "")}
	for i, form := range forms {
		msg := inbox.Message{EventID: form}
		r, err := f.handle(t, "points", msg, f.writeBiz("points", msg, "x"))
		want := inbox.Duplicate
		if i == 0 {
			want = inbox.Processed
		}
		if err != nil || r != want {
			t.Fatalf("Handle(%q) = %v, %v; want %v", form, r, err, want)
		}
	}
	var stored string
	if err := f.db.QueryRow("SELECT event_id FROM " + f.in.Table()).Scan(&stored); err != nil || stored != id.String() {
		t.Errorf("stored event_id = %q, %v; want canonical %q", stored, err, id.String())
	}
}

func (s *suite) testHandlerError(t *testing.T) {
	f := s.newFixture(t)
	msg := newMessage()
	boom := errors.New("downstream unavailable")
	r, err := f.handle(t, "points", msg, func(ctx context.Context, tx *sql.Tx) error {
		if err := f.writeBiz("points", msg, "lost")(ctx, tx); err != nil {
			return err
		}
		return boom
	})
	if r != inbox.Failed || !errors.Is(err, boom) {
		t.Fatalf("Handle = %v, %v; want Failed wrapping %v", r, err, boom)
	}
	if !strings.Contains(err.Error(), msg.EventID) || !strings.Contains(err.Error(), "redelivered") {
		t.Errorf("error %q should name the event and say it will be redelivered", err)
	}
	if n := f.inboxRows(t, ""); n != 0 {
		t.Errorf("inbox rows after a failed handler = %d, want 0", n)
	}
	if n := f.count(t, f.biz, ""); n != 0 {
		t.Errorf("business rows after a failed handler = %d, want 0 (rolled back)", n)
	}
	// The redelivery succeeds.
	r, err = f.handle(t, "points", msg, f.writeBiz("points", msg, "kept"))
	mustResult(t, r, err, inbox.Processed)
	if n := f.count(t, f.biz, "note = "+s.ph(1), "kept"); n != 1 {
		t.Errorf("business rows after retry = %d, want 1", n)
	}
	if n := f.inboxRows(t, "points"); n != 1 {
		t.Errorf("inbox rows after retry = %d, want 1", n)
	}
}

func (s *suite) testHandlerPanic(t *testing.T) {
	f := s.newFixture(t)
	msg := newMessage()
	for _, val := range []any{"nil map write", errors.New("an error value"), 42} {
		r, err := f.handle(t, "points", msg, func(ctx context.Context, tx *sql.Tx) error {
			if err := f.writeBiz("points", msg, "lost")(ctx, tx); err != nil {
				return err
			}
			panic(val)
		})
		var pe *inbox.PanicError
		if r != inbox.Failed || !errors.Is(err, inbox.ErrHandlerPanic) || !errors.As(err, &pe) {
			t.Fatalf("Handle with panic(%v) = %v, %v; want Failed, *PanicError", val, r, err)
		}
		if pe.Value != val || len(pe.Stack) == 0 || !strings.Contains(err.Error(), fmt.Sprint(val)) {
			t.Errorf("PanicError = %v (stack %d bytes); want value %v named in the message", pe, len(pe.Stack), val)
		}
		if e, ok := val.(error); ok && !errors.Is(err, e) {
			t.Errorf("errors.Is(err, panic value) = false")
		}
	}
	if n := f.inboxRows(t, ""); n != 0 {
		t.Errorf("inbox rows after panics = %d, want 0", n)
	}
	if n := f.count(t, f.biz, ""); n != 0 {
		t.Errorf("business rows after panics = %d, want 0", n)
	}
	r, err := f.handle(t, "points", msg, f.writeBiz("points", msg, "kept"))
	mustResult(t, r, err, inbox.Processed)
}

func (s *suite) testHandleTx(t *testing.T) {
	f := s.newFixture(t)
	ctx := context.Background()
	msg := newMessage()
	apply := func(commit bool) bool {
		tx, err := f.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback() //nolint:errcheck
		dup, err := f.in.HandleTx(ctx, tx, "points", msg)
		if err != nil {
			t.Fatalf("HandleTx: %v", err)
		}
		if !dup {
			if err := f.writeBiz("points", msg, "tx")(ctx, tx); err != nil {
				t.Fatal(err)
			}
		} else {
			// The transaction stays usable after a duplicate (no aborted
			// transaction on PostgreSQL).
			var one int
			if err := tx.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
				t.Fatalf("transaction unusable after a duplicate: %v", err)
			}
		}
		if commit {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		return dup
	}
	if dup := apply(false); dup {
		t.Fatal("first HandleTx reported a duplicate")
	}
	if n := f.inboxRows(t, ""); n != 0 {
		t.Fatalf("inbox rows after rollback = %d, want 0", n)
	}
	if dup := apply(true); dup {
		t.Fatal("HandleTx after a rolled-back attempt reported a duplicate")
	}
	if dup := apply(true); !dup {
		t.Fatal("second committed HandleTx was not a duplicate")
	}
	if n := f.count(t, f.biz, ""); n != 1 {
		t.Errorf("business rows = %d, want 1", n)
	}
	// Handle sees HandleTx's record.
	r, err := f.handle(t, "points", msg, f.writeBiz("points", msg, "x"))
	mustResult(t, r, err, inbox.Duplicate)
}

func (s *suite) testInvalidInput(t *testing.T) {
	f := s.newFixture(t)
	ran := false
	fn := func(context.Context, *sql.Tx) error { ran = true; return nil }
	good := newMessage()
	for _, tc := range []struct {
		name     string
		consumer string
		msg      inbox.Message
		want     error
	}{
		{"missing id", "points", inbox.Message{Type: "OrderPaid"}, inbox.ErrMissingEventID},
		{"blank id", "points", inbox.Message{EventID: "  "}, inbox.ErrMissingEventID},
		{"not a uuid", "points", inbox.Message{EventID: "order-42"}, inbox.ErrInvalidEventID},
		{"almost a uuid", "points", inbox.Message{EventID: "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5"}, inbox.ErrInvalidEventID},
		{"empty consumer", "", good, inbox.ErrInvalidConsumer},
		{"long consumer", strings.Repeat("c", 256), good, inbox.ErrInvalidConsumer},
		{"bad utf8 consumer", "p\xffoints", good, inbox.ErrInvalidConsumer},
		{"nul consumer", "p\x00oints", good, inbox.ErrInvalidConsumer},
	} {
		r, err := f.handle(t, tc.consumer, tc.msg, fn)
		if r != inbox.Failed || !errors.Is(err, tc.want) {
			t.Errorf("%s: Handle = %v, %v; want Failed, %v", tc.name, r, err, tc.want)
		}
		if _, err := f.in.HandleTx(context.Background(), f.db, tc.consumer, tc.msg); !errors.Is(err, tc.want) {
			t.Errorf("%s: HandleTx error = %v; want %v", tc.name, err, tc.want)
		}
	}
	if _, err := f.handle(t, "points", good, nil); !errors.Is(err, inbox.ErrInvalidConfig) {
		t.Errorf("Handle with nil handler: %v; want ErrInvalidConfig", err)
	}
	if ran {
		t.Error("the handler ran for an invalid message")
	}
	if n := f.inboxRows(t, ""); n != 0 {
		t.Errorf("inbox rows = %d, want 0", n)
	}
	// Long or odd type and key are stored cut, not refused: refusing them
	// would make a poison message of a harmless oddity.
	odd := inbox.Message{EventID: uuid.NewString(), Type: strings.Repeat("T", 300), Key: "k\x00\xff" + strings.Repeat("é", 300)}
	r, err := f.handle(t, "points", odd, fn)
	mustResult(t, r, err, inbox.Processed)
}

func (s *suite) testNotMigrated(t *testing.T) {
	db := s.h.Open(t)
	in, err := inbox.New(db, inbox.Config{Table: randomName("ibx_missing_"), Dialect: s.h.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	_, err = in.Handle(context.Background(), "points", newMessage(), func(context.Context, *sql.Tx) error { return nil })
	if !errors.Is(err, inbox.ErrNotMigrated) {
		t.Errorf("Handle on a missing table: %v; want ErrNotMigrated", err)
	}
	if _, err := in.Purge(context.Background(), time.Hour, 10); !errors.Is(err, inbox.ErrNotMigrated) {
		t.Errorf("Purge on a missing table: %v; want ErrNotMigrated", err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	if _, err := in.CheckVersion(context.Background(), tx, "points", "k", 1); !errors.Is(err, inbox.ErrNotMigrated) {
		t.Errorf("CheckVersion on a missing table: %v; want ErrNotMigrated", err)
	}
}

func (s *suite) testInvalidConfig(t *testing.T) {
	db := s.h.Open(t)
	for _, cfg := range []inbox.Config{
		{Table: "Inbox"},
		{Table: "inbox; DROP TABLE x"},
		{Table: "1inbox"},
		{Table: `in"box`},
		{Table: strings.Repeat("a", 51)},
		{Table: "ok", Schema: "Bad-Schema"},
		{Table: "ok", Dialect: inbox.Dialect(42)},
	} {
		if cfg.Dialect == 0 {
			cfg.Dialect = s.h.Dialect
		}
		if _, err := inbox.New(db, cfg); !errors.Is(err, inbox.ErrInvalidConfig) {
			t.Errorf("New(%+v) error = %v; want ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := inbox.New(nil, inbox.Config{}); !errors.Is(err, inbox.ErrInvalidConfig) {
		t.Errorf("New(nil db) error = %v; want ErrInvalidConfig", err)
	}
	in, err := inbox.New(db, inbox.Config{Dialect: s.h.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(in.Table(), inbox.DefaultTable) {
		t.Errorf("default table = %s, want %s", in.Table(), inbox.DefaultTable)
	}
	if _, err := in.Purge(context.Background(), 0, 10); !errors.Is(err, inbox.ErrInvalidConfig) {
		t.Errorf("Purge(0) error = %v; want ErrInvalidConfig", err)
	}
}

func (s *suite) testMigrateConcurrent(t *testing.T) {
	f := s.newFixture(t) // migrated once already
	const n = 4
	// A table nobody created yet, migrated from n pools at once.
	table := randomName("ibx_mig_")
	var wg sync.WaitGroup
	errs := make([]error, n)
	ins := make([]*inbox.Inbox, n)
	for i := range ins {
		in, err := inbox.New(s.h.Open(t), inbox.Config{Table: table, Dialect: s.h.Dialect})
		if err != nil {
			t.Fatal(err)
		}
		ins[i] = in
	}
	f.dropLater(t, ins[0].Table(), ins[0].VersionsTable())
	for i := range ins {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = ins[i].Migrate(context.Background()) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent Migrate %d: %v", i, err)
		}
	}
	for i := 0; i < 2; i++ {
		if err := ins[0].Migrate(context.Background()); err != nil {
			t.Errorf("repeated Migrate: %v", err)
		}
		if err := f.in.Migrate(context.Background()); err != nil {
			t.Errorf("repeated Migrate: %v", err)
		}
	}
	r, err := ins[1].Handle(context.Background(), "points", newMessage(), func(context.Context, *sql.Tx) error { return nil })
	mustResult(t, r, err, inbox.Processed)
}

// backdate moves a record's processed_at into the past.
func (f *fixture) backdate(t testing.TB, consumer, eventID string, age time.Duration) {
	t.Helper()
	var set string
	switch f.s.dialect() {
	case inbox.Postgres:
		set = "processed_at = processed_at - CAST($1 AS BIGINT) * INTERVAL '1 microsecond'"
	case inbox.MySQL:
		set = "processed_at = processed_at - INTERVAL ? MICROSECOND"
	default:
		set = "processed_at = processed_at - ?"
	}
	f.exec(t, "UPDATE "+f.in.Table()+" SET "+set+" WHERE consumer = "+f.s.ph(2)+" AND event_id = "+f.s.ph(3), age.Microseconds(), consumer, eventID)
}

func (s *suite) testPurge(t *testing.T) {
	f := s.newFixture(t)
	ctx := context.Background()
	nop := func(context.Context, *sql.Tx) error { return nil }
	var old, recent []inbox.Message
	for i := 0; i < 7; i++ {
		msg := newMessage()
		r, err := f.handle(t, "points", msg, nop)
		mustResult(t, r, err, inbox.Processed)
		if i < 5 {
			f.backdate(t, "points", msg.EventID, 48*time.Hour)
			old = append(old, msg)
		} else {
			recent = append(recent, msg)
		}
	}
	n, err := f.in.Purge(ctx, 24*time.Hour, 2) // three statements: 2 + 2 + 1
	if err != nil || n != int64(len(old)) {
		t.Fatalf("Purge = %d, %v; want %d", n, err, len(old))
	}
	if got := f.inboxRows(t, ""); got != len(recent) {
		t.Errorf("rows after purge = %d, want %d", got, len(recent))
	}
	if n, err := f.in.Purge(ctx, 24*time.Hour, 0); err != nil || n != 0 {
		t.Errorf("second Purge = %d, %v; want 0", n, err)
	}
	// Recent records still deduplicate; a purged one is forgotten (which is
	// why the age must exceed the broker's redelivery window).
	r, err := f.handle(t, "points", recent[0], nop)
	mustResult(t, r, err, inbox.Duplicate)
	r, err = f.handle(t, "points", old[0], nop)
	mustResult(t, r, err, inbox.Processed)
}

func (s *suite) testCheckVersion(t *testing.T) {
	f := s.newFixture(t)
	ctx := context.Background()
	check := func(consumer, key string, v int64, commit bool) bool {
		t.Helper()
		tx, err := f.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback() //nolint:errcheck
		stale, err := f.in.CheckVersion(ctx, tx, consumer, key, v)
		if err != nil {
			t.Fatalf("CheckVersion(%s, %s, %d): %v", consumer, key, v, err)
		}
		if commit {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		return stale
	}
	steps := []struct {
		consumer, key string
		v             int64
		commit, stale bool
	}{
		{"points", "order-1", 1, true, false},
		{"points", "order-1", 3, true, false},
		{"points", "order-1", 2, true, true},   // older after newer
		{"points", "order-1", 3, true, true},   // same version again
		{"points", "order-1", 9, false, false}, // rolled back: not kept
		{"points", "order-1", 4, true, false},
		{"points", "order-2", 1, true, false},   // keys are independent
		{"shipping", "order-1", 2, true, false}, // consumers are independent
		{"points", "", 5, true, false},          // the empty key is a key like any other
		{"points", "", 5, true, true},
	}
	for i, st := range steps {
		if got := check(st.consumer, st.key, st.v, st.commit); got != st.stale {
			t.Errorf("step %d: CheckVersion(%s, %q, %d) stale = %v, want %v", i, st.consumer, st.key, st.v, got, st.stale)
		}
	}
	var v int64
	if err := f.db.QueryRow("SELECT version FROM "+f.in.VersionsTable()+" WHERE consumer = "+s.ph(1)+" AND event_key = "+s.ph(2), "points", "order-1").Scan(&v); err != nil || v != 4 {
		t.Errorf("stored version = %d, %v; want 4", v, err)
	}
	tx, err := f.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	if _, err := f.in.CheckVersion(ctx, tx, "points", strings.Repeat("k", 256), 1); !errors.Is(err, inbox.ErrInvalidKey) {
		t.Errorf("long key: %v; want ErrInvalidKey", err)
	}
	if _, err := f.in.CheckVersion(ctx, tx, "", "k", 1); !errors.Is(err, inbox.ErrInvalidConsumer) {
		t.Errorf("empty consumer: %v; want ErrInvalidConsumer", err)
	}
	_ = tx.Rollback() // SQLite has one writer: free it for Handle below

	// Inside Handle, as documented: a stale event is recorded and skipped.
	msg := newMessage()
	msg.Key = "order-1"
	applied := false
	r, err := f.handle(t, "points", msg, func(ctx context.Context, tx *sql.Tx) error {
		stale, err := f.in.CheckVersion(ctx, tx, "points", msg.Key, 2)
		if err != nil || stale {
			return err
		}
		applied = true
		return nil
	})
	mustResult(t, r, err, inbox.Processed)
	if applied {
		t.Error("a stale event was applied")
	}
}

// concurrentFixture is two inbox instances (two pools) on one table, and
// a counter table: one row per event, incremented by the handler.
type concurrentFixture struct {
	*fixture
	instances [2]*inbox.Inbox
	counter   string
	next      int // first unused counter id
}

func (s *suite) newConcurrentFixture(t *testing.T) *concurrentFixture {
	f := s.newInbox(t)
	second, err := inbox.New(s.h.Open(t), f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &concurrentFixture{fixture: f, instances: [2]*inbox.Inbox{f.in, second}, counter: s.quote(randomName("cnt_"))}
	f.exec(t, "CREATE TABLE "+c.counter+" (id INTEGER NOT NULL PRIMARY KEY, n INTEGER NOT NULL)")
	f.dropLater(t, c.counter)
	return c
}

// run delivers each of several events to both instances at once and
// checks that every event's effect (its counter) ends at exactly 1. With
// failFirst, the first handler run of each event fails after its write, so
// the other instance must process the event instead.
func (c *concurrentFixture) run(t *testing.T, failFirst bool) {
	s := c.s
	events := 6
	if s.dialect() == inbox.SQLite {
		events = 3 // pairs run one after another there (one writer)
	}
	base := c.next
	c.next += events
	for i := base; i < base+events; i++ {
		c.exec(t, "INSERT INTO "+c.counter+" (id, n) VALUES ("+s.ph(1)+", 0)", i)
	}
	incr := "UPDATE " + c.counter + " SET n = n + 1 WHERE id = " + s.ph(1)
	results := make([][2]outcome, events)
	var wg sync.WaitGroup
	for e := 0; e < events; e++ {
		msg := newMessage()
		var entered sync.WaitGroup // both deliveries are about to call Handle
		entered.Add(2)
		var runs atomic.Int32
		fn := func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, incr, base+e); err != nil {
				return err
			}
			// Hold the transaction open until the other delivery is
			// inside Handle, so it meets the uncommitted record.
			waitTimeout(&entered, time.Second)
			time.Sleep(2 * time.Millisecond)
			if failFirst && runs.Add(1) == 1 {
				return errors.New("first attempt fails")
			}
			return nil
		}
		for k := 0; k < 2; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				entered.Done()
				r, err := c.instances[k].Handle(context.Background(), "points", msg, fn)
				results[e][k] = outcome{r, err}
			}()
		}
		if s.dialect() == inbox.SQLite {
			// One writer at a time anyway: more pairs at once only add
			// busy-handler sleeps.
			wg.Wait()
		}
	}
	wg.Wait()
	rows, err := c.db.Query("SELECT id, n FROM "+c.counter+" WHERE id >= "+s.ph(1)+" ORDER BY id", base)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("event %d: effect applied %d times, want exactly 1 (results %v)", id-base, n, results[id-base])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for e, pair := range results {
		var processed, other int
		for _, o := range pair {
			switch {
			case o.r == inbox.Processed && o.err == nil:
				processed++
			case o.r == inbox.Duplicate && o.err == nil && !failFirst:
				other++
			case o.r == inbox.Failed && o.err != nil && failFirst:
				other++
			}
		}
		if processed != 1 || other != 1 {
			t.Errorf("event %d: results %v; want one Processed and one %s", e, pair, map[bool]string{false: "Duplicate", true: "failure"}[failFirst])
		}
	}
	if n := c.inboxRows(t, "points"); n != base+events {
		t.Errorf("inbox rows = %d, want %d", n, base+events)
	}
}

type outcome struct {
	r   inbox.Result
	err error
}

func (o outcome) String() string {
	if o.err != nil {
		return fmt.Sprintf("%v: %v", o.r, o.err)
	}
	return o.r.String()
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// WantParseError fails t unless err matches every error in want (with
// errors.Is) and, when header is not empty, is an *inbox.HeaderError naming
// that header: the error check of the header-reading packages' (natsmsg,
// kafkamsg, amqpmsg) table tests.
func WantParseError(t testing.TB, err error, want []error, header string) {
	t.Helper()
	for _, w := range want {
		if !errors.Is(err, w) {
			t.Errorf("error %v does not match %v", err, w)
		}
	}
	if header != "" {
		var he *inbox.HeaderError
		if !errors.As(err, &he) || he.Header != header {
			t.Errorf("error %v: want a *HeaderError for %s", err, header)
		}
	}
}
