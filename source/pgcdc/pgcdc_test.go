package pgcdc_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/source"
	"github.com/outbox-go/outbox/source/pgcdc"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/pgstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent(), goleak.Cleanup(func(code int) {
		testenv.RemoveOutboxBinary()
		os.Exit(code)
	}))
}

func quietLogger() *slog.Logger {
	if os.Getenv("PGCDC_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func uniq(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// fixture is a fresh outbox table with its own slot and publication.
type fixture struct {
	t     testing.TB
	pool  *pgxpool.Pool
	cfg   pgcdc.Config
	store *pgstore.Store // the table's store (enqueue, dead list)
}

func newFixture(t *testing.T, tableLess bool) *fixture {
	t.Helper()
	return newFixtureTB(t, tableLess)
}

func newFixtureTB(t testing.TB, tableLess bool) *fixture {
	t.Helper()
	url := testenv.Require(t, testenv.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		testenv.Unavailable(t, testenv.Postgres, err)
	}
	table := uniq("cdc_")
	f := &fixture{t: t, pool: pool, cfg: pgcdc.Config{Table: table, TableLess: tableLess, LeaseFor: 2 * time.Second,
		Heartbeat: 200 * time.Millisecond, StatusInterval: 100 * time.Millisecond, Logger: quietLogger(), Prefix: "outbox_" + table}}
	name := table
	if tableLess {
		name = table + "_dead" // dead events of the table-less mode live there
	}
	st, err := pgstore.New(pool, pgstore.Config{Options: store.Options{Table: name}, DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	f.store = st
	if !tableLess {
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { f.cleanup() })
	return f
}

func (f *fixture) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.store.Close()
	cfg := f.cfg.WithDefaults()
	dropSlot(ctx, f.t, f.pool, cfg.Slot)
	_, _ = f.pool.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{cfg.Publication}.Sanitize())
	for _, suffix := range []string{"", "_cdc", "_dead", "_archive", "_claims", "_migrations", "_dead_archive", "_dead_claims", "_dead_migrations"} {
		_, _ = f.pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{f.cfg.Table + suffix}.Sanitize()+" CASCADE")
	}
}

// dropSlot drops slot, terminating whoever streams it; an abandoned slot
// retains WAL for everyone.
func dropSlot(ctx context.Context, t testing.TB, pool *pgxpool.Pool, slot string) {
	for i := 0; i < 100; i++ {
		_, _ = pool.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL", slot)
		_, err := pool.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("could not drop slot %s: drop it by hand (it retains WAL)", slot)
}

// running is a started Source and its delivery loop.
type running struct {
	src    *pgcdc.Source
	loop   *relay.Relay
	broker *membroker.Broker
	cancel context.CancelFunc
	done   chan error
}

func (f *fixture) start(b *membroker.Broker, lcfg relay.Config) *running {
	f.t.Helper()
	src, err := pgcdc.New(f.pool, f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := src.Start(ctx); err != nil {
		f.t.Fatal(err)
	}
	if lcfg.BackoffBase == 0 {
		lcfg.BackoffBase, lcfg.BackoffMax = 5*time.Millisecond, 50*time.Millisecond
	}
	lcfg.Logger = quietLogger()
	loop, err := relay.NewSource(src, b, lcfg)
	if err != nil {
		f.t.Fatal(err)
	}
	r := &running{src: src, loop: loop, broker: b, done: make(chan error, 1)}
	lctx, lcancel := context.WithCancel(context.Background())
	r.cancel = lcancel
	go func() { r.done <- loop.Run(lctx) }()
	f.t.Cleanup(func() { r.stop() })
	return r
}

func (r *running) stop() error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	r.cancel = nil
	err := <-r.done
	r.src.Close()
	return err
}

func newBroker(t *testing.T) *membroker.Broker {
	b, err := membroker.New(membroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.pool.Exec(context.Background(), sql, args...); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) table() string { return pgx.Identifier{f.cfg.Table}.Sanitize() }

func (f *fixture) count(where string) int {
	f.t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+f.table()+" WHERE "+where).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func payloads(evs []outbox.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = string(e.Payload)
	}
	return out
}

// Two transactions commit in the opposite order of their ids: CDC delivers
// in commit order, so the later id of the key comes first.
func TestOutOfOrderCommitsInCommitOrder(t *testing.T) {
	f := newFixture(t, false)
	b := newBroker(t)
	f.start(b, relay.Config{})
	ctx := context.Background()
	txA, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx)
	ins := "INSERT INTO " + f.table() + " (topic, event_key, event_type, payload) VALUES ('t', 'k', 'T', $1)"
	if _, err := txA.Exec(ctx, ins, []byte("A")); err != nil {
		t.Fatal(err)
	}
	f.exec(ins, []byte("B")) // commits first, with the larger id
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := b.Wait(waitCtx(t), "t", 2)
	if err != nil {
		t.Fatal(err)
	}
	if p := payloads(got); p[0] != "B" || p[1] != "A" || got[0].ID < got[1].ID {
		t.Fatalf("delivered %v (ids %d, %d), want B then A", p, got[0].ID, got[1].ID)
	}
	waitFor(t, "delivered rows deleted", 10*time.Second, func() bool { return f.count("true") == 0 })
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRolledBackNeverDelivered(t *testing.T) {
	f := newFixture(t, false)
	b := newBroker(t)
	f.start(b, relay.Config{})
	ctx := context.Background()
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ins := "INSERT INTO " + f.table() + " (topic, event_key, event_type, payload) VALUES ('t', $1, 'T', $2)"
	if _, err := tx.Exec(ctx, ins, "k", []byte("rolled back")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	f.exec(ins, "k", []byte("committed"))
	if _, err := b.Wait(waitCtx(t), "t", 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	got := b.Events("t")
	if len(got) != 1 || string(got[0].Payload) != "committed" {
		t.Fatalf("delivered %v", payloads(got))
	}
}

// Every contract column reaches the broker unchanged.
func TestColumnsDecoded(t *testing.T) {
	f := newFixture(t, false)
	b := newBroker(t)
	f.start(b, relay.Config{})
	ctx := context.Background()
	payload := []byte{0, 1, 2, '\\', 0xff, 'x'}
	m := outbox.Message{Topic: "orders", Key: "order-1", Type: "OrderPaid", AggregateType: "Order", SchemaVersion: 3,
		Payload: payload, ContentType: "application/octet-stream", Headers: map[string]string{"trace-id": "abc"}}
	if err := f.store.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	got, err := b.Wait(waitCtx(t), "orders", 1)
	if err != nil {
		t.Fatal(err)
	}
	e := got[0]
	if e.Key != m.Key || e.Type != m.Type || e.AggregateType != m.AggregateType || e.SchemaVersion != 3 || string(e.Payload) != string(payload) ||
		e.ContentType != m.ContentType || e.Headers["trace-id"] != "abc" || e.EventID == "" || e.ID == 0 || e.CreatedAt.IsZero() {
		t.Fatalf("decoded %+v", e)
	}
	if d := time.Since(e.CreatedAt); d < 0 || d > time.Minute {
		t.Fatalf("created_at %v is %v away", e.CreatedAt, d)
	}
}

// A row that breaks the table contract is buried DEAD with its reason, and
// the events after it flow; a permanent broker error burials too, and
// `outbox dead retry` (an UPDATE back to NEW) brings the row back.
func TestBadRowsAndDeadEvents(t *testing.T) {
	f := newFixture(t, false)
	b := newBroker(t)
	b.SetHook(func(e outbox.Event) error {
		if string(e.Payload) == "poison" {
			return broker.Permanentf("refused")
		}
		return nil
	})
	f.start(b, relay.Config{})
	ins := "INSERT INTO " + f.table() + " (topic, event_key, event_type, payload, headers) VALUES ('t', 'k', 'T', $1, $2)"
	f.exec(ins, []byte("bad headers"), `{"n": 1}`)
	f.exec(ins, []byte("poison"), `{}`)
	f.exec(ins, []byte("fine"), `{}`)
	if _, err := b.Wait(waitCtx(t), "t", 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the good row deleted", 10*time.Second, func() bool { return f.count("status = 'NEW'") == 0 })
	dead, err := f.store.ListDead(context.Background(), store.DeadQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 2 || !strings.Contains(dead[0].LastError, "headers") || !strings.Contains(dead[1].LastError, "refused") {
		t.Fatalf("dead %+v", dead)
	}
	b.SetHook(nil)
	if _, err := f.store.RequeueDead(context.Background(), store.DeadQuery{IDs: []int64{dead[1].ID}}); err != nil {
		t.Fatal(err)
	}
	got, err := b.Wait(waitCtx(t), "t", 2)
	if err != nil {
		t.Fatal(err)
	}
	if p := payloads(got); p[0] != "fine" || p[1] != "poison" {
		t.Fatalf("delivered %v", p)
	}
	waitFor(t, "the requeued row deleted", 10*time.Second, func() bool { return f.count("true") == 1 })
}

func slotConfirmed(t *testing.T, pool *pgxpool.Pool, slot string) pglogrepl.LSN {
	t.Helper()
	var s *string
	err := pool.QueryRow(context.Background(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) || s == nil {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	l, err := pglogrepl.ParseLSN(*s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func currentLSN(t *testing.T, pool *pgxpool.Pool) pglogrepl.LSN {
	t.Helper()
	var s string
	if err := pool.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	l, _ := pglogrepl.ParseLSN(s)
	return l
}

// With nothing written to the outbox, the heartbeat and the status updates
// move the slot's confirmed position up to the server's current WAL.
func TestHeartbeatAdvancesIdleSlot(t *testing.T) {
	f := newFixture(t, false)
	r := f.start(newBroker(t), relay.Config{})
	cfg := r.src.Config()
	waitFor(t, "the slot", 10*time.Second, func() bool { return slotConfirmed(t, f.pool, cfg.Slot) != 0 })
	target := currentLSN(t, f.pool)
	waitFor(t, fmt.Sprintf("confirmed_flush_lsn to reach %s", target), 20*time.Second, func() bool { return slotConfirmed(t, f.pool, cfg.Slot) >= target })
	lag, err := r.src.Lag(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if lag.WALStatus == "lost" || lag.Bytes < 0 {
		t.Fatalf("lag %+v", lag)
	}
}

// The slot is dropped while the relay is stopped, and again while it
// streams: both times it is detected and the rows it had not delivered are
// delivered by polling the table.
func TestSlotDroppedBehindItsBack(t *testing.T) {
	f := newFixture(t, false)
	b := newBroker(t)
	ctx := context.Background()
	ins := "INSERT INTO " + f.table() + " (topic, event_key, event_type, payload) VALUES ('t', 'k', 'T', $1)"
	r := f.start(b, relay.Config{})
	f.exec(ins, []byte("1"))
	if _, err := b.Wait(waitCtx(t), "t", 1); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	cfg := r.src.Config()
	f.exec(ins, []byte("2"))
	f.exec(ins, []byte("3"))
	dropSlot(ctx, t, f.pool, cfg.Slot)
	f.start(b, relay.Config{})
	f.exec(ins, []byte("4"))
	if _, err := b.Wait(waitCtx(t), "t", 4); err != nil {
		t.Fatalf("%v: delivered %v", err, payloads(b.Events("t")))
	}
	// now behind the back of a running source
	f.exec(ins, []byte("5"))
	dropSlot(ctx, t, f.pool, cfg.Slot)
	f.exec(ins, []byte("6"))
	if _, err := b.Wait(waitCtx(t), "t", 6); err != nil {
		t.Fatalf("%v: delivered %v", err, payloads(b.Events("t")))
	}
	seen := map[string]bool{}
	for _, p := range payloads(b.Events("t")) {
		seen[p] = true
	}
	for i := 1; i <= 6; i++ {
		if !seen[fmt.Sprint(i)] {
			t.Fatalf("event %d lost: delivered %v", i, payloads(b.Events("t")))
		}
	}
	checkKeyOrder(t, b.Events("t"))
	waitFor(t, "the table drained", 10*time.Second, func() bool { return f.count("true") == 0 })
}

// checkKeyOrder: first deliveries of each key in payload (numeric) order.
func checkKeyOrder(t *testing.T, evs []outbox.Event) {
	t.Helper()
	last := map[string]int{}
	seen := map[string]bool{}
	for _, e := range evs {
		if seen[e.EventID] {
			continue
		}
		seen[e.EventID] = true
		var n int
		fmt.Sscan(string(e.Payload), &n)
		if n < last[e.Key] {
			t.Fatalf("key %s: %d delivered after %d", e.Key, n, last[e.Key])
		}
		last[e.Key] = n
	}
}

func TestTableLessRoundTrip(t *testing.T) {
	f := newFixture(t, true)
	b := newBroker(t)
	b.SetHook(func(e outbox.Event) error {
		if string(e.Payload) == "poison" {
			return broker.Permanentf("refused")
		}
		return nil
	})
	f.start(b, relay.Config{})
	ctx := context.Background()
	em := pgcdc.Emitter{Prefix: f.cfg.Prefix}
	emit := func(commit bool, msgs ...outbox.Message) {
		tx, err := f.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if err := em.Enqueue(ctx, tx, msgs...); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	msg := func(key, payload string) outbox.Message {
		return outbox.Message{Topic: "t", Key: key, Type: "T", Payload: []byte(payload), Headers: map[string]string{"h": payload}}
	}
	emit(true, msg("k", "1"), msg("k", "2"), msg("j", "3"))
	emit(false, msg("k", "rolled back"))
	emit(true, msg("k", "poison"))
	// a record no Emitter wrote: buried with its raw content, never a crash
	if _, err := f.pool.Exec(ctx, "SELECT pg_logical_emit_message(true, $1, $2::bytea)", f.cfg.Prefix, []byte("garbage\x00")); err != nil {
		t.Fatal(err)
	}
	emit(true, msg("k", "4"))
	if err := (pgcdc.Emitter{}).Enqueue(ctx, f.pool, outbox.Message{}); err == nil {
		t.Fatal("an invalid message was emitted")
	}
	if _, err := b.Wait(waitCtx(t), "t", 4); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	got := b.Events("t")
	var k, j []string
	for _, e := range got {
		if e.Key == "k" {
			k = append(k, string(e.Payload))
		} else {
			j = append(j, string(e.Payload))
		}
	}
	if strings.Join(k, ",") != "1,2,4" || strings.Join(j, ",") != "3" {
		t.Fatalf("delivered %v", payloads(got))
	}
	if got[0].Headers["h"] != "1" || got[0].EventID == "" {
		t.Fatalf("event %+v", got[0])
	}
	var dead []store.Record
	waitFor(t, "the buried event", 10*time.Second, func() bool {
		var err error
		dead, err = f.store.ListDead(ctx, store.DeadQuery{})
		return err == nil && len(dead) == 2
	})
	if string(dead[0].Payload) == "poison" {
		dead[0], dead[1] = dead[1], dead[0]
	}
	if string(dead[1].Payload) != "poison" || !strings.Contains(dead[1].LastError, "refused") {
		t.Fatalf("buried %+v", dead[1])
	}
	if string(dead[0].Payload) != "garbage\x00" || !strings.Contains(dead[0].LastError, "not an outbox record") {
		t.Fatalf("buried %+v", dead[0])
	}
}

// A table-less slot that vanished cannot be recovered by polling: the
// source refuses, naming the fix, instead of going on without the events.
func TestTableLessLostSlotRefused(t *testing.T) {
	f := newFixture(t, true)
	b := newBroker(t)
	r := f.start(b, relay.Config{})
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	cfg := r.src.Config()
	dropSlot(context.Background(), t, f.pool, cfg.Slot)
	src, err := pgcdc.New(f.pool, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = src.Start(waitCtx(t))
	if !errors.Is(err, pgcdc.ErrSlotLost) || !strings.Contains(err.Error(), "drop-slot") {
		t.Fatalf("Start: %v", err)
	}
	if err := pgcdc.DropSlot(context.Background(), f.pool, f.cfg, true); err != nil {
		t.Fatal(err)
	}
	f.start(b, relay.Config{}) // forgotten: a new slot, no complaint
}

// One streamer at a time: a second source waits for the lease and takes
// over when the first stops; a source whose lease was taken is fenced.
func TestLeaseOneStreamer(t *testing.T) {
	f := newFixture(t, false)
	b := newBroker(t)
	ins := "INSERT INTO " + f.table() + " (topic, event_key, event_type, payload) VALUES ('t', 'k', 'T', $1)"
	r1 := f.start(b, relay.Config{})
	f.exec(ins, []byte("1"))
	if _, err := b.Wait(waitCtx(t), "t", 1); err != nil {
		t.Fatal(err)
	}
	second, err := pgcdc.New(f.pool, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- second.Start(waitCtx(t)) }()
	select {
	case err := <-started:
		t.Fatalf("second source started while the first streams: %v", err)
	case <-time.After(3 * f.cfg.LeaseFor / 2):
	}
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	if second.Epoch() <= r1.src.Epoch() {
		t.Fatalf("epoch %d after %d", second.Epoch(), r1.src.Epoch())
	}
	loop, err := relay.NewSource(second, b, relay.Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	f.exec(ins, []byte("2"))
	if _, err := b.Wait(waitCtx(t), "t", 2); err != nil {
		t.Fatal(err)
	}
	// an operator (or a successor) takes the lease: the source stops
	f.exec("UPDATE " + pgx.Identifier{f.cfg.Table + "_cdc"}.Sanitize() + " SET owner = 'thief', epoch = epoch + 1")
	f.exec(ins, []byte("3"))
	select {
	case err := <-done:
		if !errors.Is(err, source.ErrFenced) {
			t.Fatalf("Run: %v, want ErrFenced", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the fenced source kept running")
	}
	cancel()
	second.Close()
	// the fenced source deleted nothing after the theft
	if n := f.count("status = 'NEW' AND payload = '3'"); n != 1 {
		t.Fatalf("the row committed after the theft was deleted by the fenced source")
	}
}

func TestDropSlotRefusesUndelivered(t *testing.T) {
	f := newFixture(t, false)
	b := newBroker(t)
	b.SetDown(true)
	r := f.start(b, relay.Config{})
	f.exec("INSERT INTO " + f.table() + " (topic, event_type) VALUES ('t', 'T')")
	time.Sleep(200 * time.Millisecond)
	if err := pgcdc.DropSlot(context.Background(), f.pool, f.cfg, false); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("DropSlot while streaming: %v", err)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	err := pgcdc.DropSlot(context.Background(), f.pool, f.cfg, false)
	if !errors.Is(err, pgcdc.ErrUndelivered) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("DropSlot: %v", err)
	}
	if err := pgcdc.DropSlot(context.Background(), f.pool, f.cfg, true); err != nil {
		t.Fatal(err)
	}
	cfg := f.cfg.WithDefaults()
	if slotConfirmed(t, f.pool, cfg.Slot) != 0 {
		t.Fatal("the slot is still there")
	}
	// the next start makes a new slot and delivers the row by polling
	b.SetDown(false)
	f.start(b, relay.Config{})
	if _, err := b.Wait(waitCtx(t), "t", 1); err != nil {
		t.Fatal(err)
	}
}

// A slot the server invalidated (wal_status lost: it removed WAL the slot
// had not confirmed, past max_slot_wal_keep_size) is dropped and created
// again, and the rows it had not delivered are delivered by polling the
// table. The server's invalidation itself is simulated (MarkSlotLost: the
// source sees wal_status = lost on its next start), since making a shared
// server remove WAL means lowering max_slot_wal_keep_size for every slot on
// it; what the server does is drop nothing, so this exercises the source's
// whole path on the real slot.
func TestLostSlotRecreated(t *testing.T) {
	f := newFixture(t, false)
	b := newBroker(t)
	ins := "INSERT INTO " + f.table() + " (topic, event_key, event_type, payload) VALUES ('t', 'k', 'T', $1)"
	r := f.start(b, relay.Config{})
	f.exec(ins, []byte("1"))
	if _, err := b.Wait(waitCtx(t), "t", 1); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	cfg := r.src.Config()
	before := slotConfirmed(t, f.pool, cfg.Slot)
	f.exec(ins, []byte("2"))
	f.exec(ins, []byte("3"))
	pgcdc.MarkSlotLost(cfg.Slot)
	defer pgcdc.ClearSlotHook()
	f.start(b, relay.Config{})
	f.exec(ins, []byte("4"))
	if _, err := b.Wait(waitCtx(t), "t", 4); err != nil {
		t.Fatalf("%v: delivered %v", err, payloads(b.Events("t")))
	}
	got := payloads(b.Events("t"))
	if !slices.Equal(got[:4], []string{"1", "2", "3", "4"}) {
		t.Fatalf("delivered %v, want 1 2 3 4 in order", got)
	}
	waitFor(t, "the table drained", 10*time.Second, func() bool { return f.count("true") == 0 })
	var slotLSN string
	if err := f.pool.QueryRow(context.Background(), "SELECT slot_lsn FROM "+pgx.Identifier{cfg.Table + "_cdc"}.Sanitize()+" WHERE slot = $1", cfg.Slot).Scan(&slotLSN); err != nil {
		t.Fatal(err)
	}
	if lsn, err := pglogrepl.ParseLSN(slotLSN); err != nil || lsn <= before {
		t.Fatalf("the slot was not created again: created at %s, confirmed %s before (%v)", slotLSN, before, err)
	}
}

// In table-less mode the events of a lost slot lived only in its WAL: the
// source refuses to start, naming ErrSlotLost and the fix.
func TestTableLessInvalidatedSlotRefused(t *testing.T) {
	f := newFixture(t, true)
	b := newBroker(t)
	r := f.start(b, relay.Config{})
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	cfg := r.src.Config()
	pgcdc.MarkSlotLost(cfg.Slot)
	defer pgcdc.ClearSlotHook()
	src, err := pgcdc.New(f.pool, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = src.Start(waitCtx(t))
	if !errors.Is(err, pgcdc.ErrSlotLost) || !strings.Contains(err.Error(), "drop-slot") {
		t.Fatalf("Start: %v", err)
	}
}

// Rows already in the table when the slot is created (the recovery poll's
// rows) are delivered before the streamed rows of the same keys, also when
// writers go on committing while the slot is being created.
func TestPolledRowsBeforeStreamedOnes(t *testing.T) {
	f := newFixture(t, false)
	b := newBroker(t)
	ins := "INSERT INTO " + f.table() + " (topic, event_key, event_type, payload) VALUES ('t', $1, 'T', $2)"
	var seq atomic.Int64
	write := func() {
		n := seq.Add(1)
		f.exec(ins, fmt.Sprint("k", n%16), []byte(fmt.Sprint(n)))
	}
	for range 100 {
		write()
	}
	stop := make(chan struct{})
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for {
			select {
			case <-stop:
				return
			default:
				write()
				time.Sleep(2 * time.Millisecond)
			}
		}
	}()
	f.start(b, relay.Config{BatchSize: 50})
	time.Sleep(500 * time.Millisecond)
	close(stop)
	<-wrote
	total := int(seq.Load())
	if _, err := b.Wait(waitCtx(t), "t", total); err != nil {
		t.Fatalf("%v: delivered %d of %d", err, len(b.Events("t")), total)
	}
	checkKeyOrder(t, b.Events("t"))
}
