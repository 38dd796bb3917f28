package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/source"
)

// Fixture is one fresh stream of a source under test, with the means to
// write into it and to look at what operators see.
type Fixture interface {
	// Open starts a Source on the stream, resuming where the last one
	// closed on it acknowledged. The suite closes each with Close before
	// it opens the next.
	Open(t testing.TB) source.Source
	// Close stops s as a graceful shutdown does (a restart follows).
	Close(t testing.TB, s source.Source)
	// Begin starts a producer transaction on the stream's database.
	Begin(t testing.TB) Tx
	// Dead lists the events operators see as DEAD (`outbox dead list`).
	Dead(t testing.TB) []Dead
}

// Takeover is implemented by a Fixture whose source holds leases: it makes
// another process take the stream (or the events s holds) over from s,
// the way a successor does after s stalled past its lease.
type Takeover interface {
	Takeover(t testing.TB, s source.Source)
}

// Tx is a producer's transaction.
type Tx interface {
	// Write writes msgs in the transaction.
	Write(t testing.TB, msgs ...outbox.Message)
	// Commit commits it.
	Commit(t testing.TB)
	// Rollback rolls it back.
	Rollback(t testing.TB)
}

// Dead is one event as operators see it DEAD.
type Dead struct {
	EventID string
	Reason  string
}

// Suite is what a source gives the suite.
type Suite struct {
	// New returns a Fixture over a fresh stream and registers t.Cleanup to
	// drop what it created. Required.
	New func(t *testing.T) Fixture
	// CommitOrder says the source hands out transactions in commit order
	// even when it learns of several at once (a log tail). Without it the
	// suite only checks commit order for transactions it reads one by one.
	CommitOrder bool
	// Wait bounds how long the suite waits for events to come; default 30s.
	Wait time.Duration
}

// Run runs the suite's subtests, one after another.
func Run(t *testing.T, s Suite) {
	t.Helper()
	if s.New == nil {
		t.Fatal("sourcetest: Suite.New is required")
	}
	if s.Wait <= 0 {
		s.Wait = 30 * time.Second
	}
	t.Run("CommittedOnly", s.testCommittedOnly)
	t.Run("CommitOrder", s.testCommitOrder)
	t.Run("ConcurrentCommits", s.testConcurrentCommits)
	t.Run("AckRestart", s.testAckRestart)
	t.Run("Bury", s.testBury)
	t.Run("Fenced", s.testFenced)
	t.Run("NextCancel", s.testNextCancel)
}

// msg returns a message labelled label (its payload and type).
func msg(label, key string) outbox.Message {
	return outbox.Message{EventID: outbox.NewEventID(), Topic: "sourcetest", Key: key, Type: "sourcetest." + label, Payload: []byte(label)}
}

func commit(t testing.TB, fx Fixture, msgs ...outbox.Message) {
	t.Helper()
	tx := fx.Begin(t)
	tx.Write(t, msgs...)
	tx.Commit(t)
}

// reader reads a Source and checks, on every Txn, that positions never go
// back and grow between transactions that carry events.
type reader struct {
	t       testing.TB
	src     source.Source
	last    source.Position
	lastEv  source.Position
	txns    []source.Txn // those with events, in the order read
	byEvent map[string]source.Position
	label   map[string]string // event id → label, of the messages written
}

func newReader(t testing.TB, src source.Source, written ...outbox.Message) *reader {
	r := &reader{t: t, src: src, byEvent: map[string]source.Position{}, label: map[string]string{}}
	r.know(written...)
	return r
}

func (r *reader) know(msgs ...outbox.Message) {
	for _, m := range msgs {
		r.label[m.EventID] = string(m.Payload)
	}
}

// until reads until every message of want was returned, or wait passed
// (then it fails t). It returns the events read on the way, in order.
func (r *reader) until(wait time.Duration, what string, want ...outbox.Message) []outbox.Event {
	r.t.Helper()
	r.know(want...)
	var got []outbox.Event
	missing := map[string]bool{}
	for _, m := range want {
		missing[m.EventID] = true
	}
	deadline := time.Now().Add(wait)
	for len(missing) > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			var names []string
			for _, m := range want {
				if missing[m.EventID] {
					names = append(names, string(m.Payload))
				}
			}
			r.t.Fatalf("%s: after %s, Next has not returned %s (returned so far: %s)", what, wait, strings.Join(names, ", "), r.labels(got))
		}
		ctx, cancel := context.WithTimeout(context.Background(), left)
		txns, err := r.src.Next(ctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			r.t.Fatalf("%s: Next: %v", what, err)
		}
		for _, tx := range txns {
			if tx.Pos < r.last {
				r.t.Fatalf("%s: position %d after %d: positions must never go back", what, tx.Pos, r.last)
			}
			r.last = tx.Pos
			if len(tx.Events) == 0 {
				continue
			}
			if tx.Pos <= r.lastEv {
				r.t.Fatalf("%s: a transaction with events at position %d after one at %d: positions must grow", what, tx.Pos, r.lastEv)
			}
			r.lastEv = tx.Pos
			r.txns = append(r.txns, tx)
			for _, e := range tx.Events {
				if e.EventID == "" {
					r.t.Fatalf("%s: Next returned an event without an EventID: %+v", what, e)
				}
				r.byEvent[e.EventID] = tx.Pos
				delete(missing, e.EventID)
				got = append(got, e)
			}
		}
	}
	return got
}

// pos is the position of the transaction that carried m.
func (r *reader) pos(m outbox.Message) source.Position {
	r.t.Helper()
	p, ok := r.byEvent[m.EventID]
	if !ok {
		r.t.Fatalf("event %s was not read", m.Payload)
	}
	return p
}

func (r *reader) labels(evs []outbox.Event) string {
	var out []string
	for _, e := range evs {
		l, ok := r.label[e.EventID]
		if !ok {
			l = "?" + e.EventID
		}
		out = append(out, l)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// none fails t when evs holds any of msgs.
func (r *reader) none(what string, evs []outbox.Event, msgs ...outbox.Message) {
	r.t.Helper()
	for _, e := range evs {
		for _, m := range msgs {
			if e.EventID == m.EventID {
				r.t.Errorf("%s: Next returned %s (got %s)", what, m.Payload, r.labels(evs))
			}
		}
	}
}

// order fails t unless the events of msgs appear in evs in that order.
func (r *reader) order(what string, evs []outbox.Event, msgs ...outbox.Message) {
	r.t.Helper()
	at := map[string]int{}
	for i, e := range evs {
		if _, seen := at[e.EventID]; !seen {
			at[e.EventID] = i
		}
	}
	for i := 1; i < len(msgs); i++ {
		a, b := at[msgs[i-1].EventID], at[msgs[i].EventID]
		if a > b {
			r.t.Fatalf("%s: %s came after %s; want the order %s (got %s)", what, msgs[i-1].Payload, msgs[i].Payload, labelsOf(msgs), r.labels(evs))
		}
	}
}

func labelsOf(msgs []outbox.Message) string {
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Payload))
	}
	return "[" + strings.Join(out, " ") + "]"
}

// testCommittedOnly: a rolled-back transaction is never returned; an open
// one is returned only after it commits.
func (s Suite) testCommittedOnly(t *testing.T) {
	fx := s.New(t)
	src := fx.Open(t)
	defer fx.Close(t, src)
	rolled := msg("rolled-back", "k")
	tx := fx.Begin(t)
	tx.Write(t, rolled)
	tx.Rollback(t)
	pending := msg("open", "k2")
	open := fx.Begin(t)
	open.Write(t, pending)
	first := msg("committed", "k")
	commit(t, fx, first)
	r := newReader(t, src, rolled, pending)
	got := r.until(s.Wait, "a committed transaction", first)
	r.none("after a rollback", got, rolled)
	r.none("while its transaction is open", got, pending)
	open.Commit(t)
	last := msg("last", "")
	commit(t, fx, last)
	got = r.until(s.Wait, "the transaction committed last", pending, last)
	r.none("after a rollback", got, rolled)
}

// testCommitOrder: sequential transactions in commit order, their events
// in write order, and a transaction's events under one position when the
// source keeps transactions whole.
func (s Suite) testCommitOrder(t *testing.T) {
	fx := s.New(t)
	src := fx.Open(t)
	defer fx.Close(t, src)
	var all []outbox.Message
	var txns [][]outbox.Message
	for i := range 5 {
		batch := []outbox.Message{msg(fmt.Sprintf("t%d.a", i), "k1"), msg(fmt.Sprintf("t%d.b", i), "k2"), msg(fmt.Sprintf("t%d.c", i), "")}
		commit(t, fx, batch...)
		all = append(all, batch...)
		txns = append(txns, batch)
	}
	r := newReader(t, src)
	got := r.until(s.Wait, "five committed transactions", all...)
	r.order("commit order", got, all...)
	if s.CommitOrder {
		for i, batch := range txns {
			p := r.pos(batch[0])
			for _, m := range batch[1:] {
				if r.pos(m) != p {
					t.Errorf("transaction %d: %s at position %d, %s at %d: one transaction's events share its position", i, batch[0].Payload, p, m.Payload, r.pos(m))
				}
			}
		}
	}
}

// testConcurrentCommits: a transaction that began first and committed
// last comes after the one that committed in between.
func (s Suite) testConcurrentCommits(t *testing.T) {
	fx := s.New(t)
	src := fx.Open(t)
	defer fx.Close(t, src)
	a, b := msg("A-began-first", "k"), msg("B-committed-first", "k")
	txA := fx.Begin(t)
	txA.Write(t, a)
	txB := fx.Begin(t)
	txB.Write(t, b)
	txB.Commit(t)
	r := newReader(t, src, a)
	if !s.CommitOrder {
		// read B before A commits, what a poller can promise, and settle
		// it, as the loop does (a store holds A, of the same key, back
		// while B is claimed)
		got := r.until(s.Wait, "B, committed while A is open", b)
		r.none("while A is open", got, a)
		ctx, cancel := context.WithTimeout(context.Background(), s.Wait)
		defer cancel()
		if err := src.Ack(ctx, r.pos(b)); err != nil {
			t.Fatalf("Ack: %v", err)
		}
		txA.Commit(t)
		r.until(s.Wait, "A, committed after B", a)
		return
	}
	txA.Commit(t)
	got := r.until(s.Wait, "A, committed after B", a, b)
	r.order("commit order of interleaved transactions", got, b, a)
}

// testAckRestart: Ack is idempotent; after a restart no acknowledged event
// comes back, and the unacknowledged ones do, with the same event ids.
func (s Suite) testAckRestart(t *testing.T) {
	fx := s.New(t)
	src := fx.Open(t)
	m1, m2, m3 := msg("t1", "k"), msg("t2", "k2"), msg("t3", "k")
	for _, m := range []outbox.Message{m1, m2, m3} {
		commit(t, fx, m)
	}
	r := newReader(t, src)
	r.until(s.Wait, "three transactions", m1, m2, m3)
	ctx, cancel := context.WithTimeout(context.Background(), s.Wait)
	defer cancel()
	p1, p2 := r.pos(m1), r.pos(m2)
	if r.pos(m3) == p2 {
		t.Fatalf("t2 and t3 share position %d although they committed apart", p2)
	}
	if err := src.Ack(ctx, p2); err != nil {
		t.Fatalf("Ack(%d): %v", p2, err)
	}
	if err := src.Ack(ctx, p2); err != nil {
		t.Fatalf("Ack(%d) again: %v; Ack must be idempotent", p2, err)
	}
	if err := src.Ack(ctx, p1); err != nil {
		t.Fatalf("Ack(%d) after Ack(%d): %v; acknowledging an older position must be harmless", p1, p2, err)
	}
	fx.Close(t, src)

	src = fx.Open(t)
	s1 := msg("after-restart", "k")
	commit(t, fx, s1)
	r = newReader(t, src, m1, m2)
	got := r.until(s.Wait, "after a restart, the unacknowledged t3 (at least once) and a new transaction", m3, s1)
	r.none("after a restart", got, m1, m2)
	r.order("after a restart", got, m3, s1)
	var last source.Position
	for _, tx := range r.txns {
		last = max(last, tx.Pos)
	}
	if err := src.Ack(ctx, last); err != nil {
		t.Fatalf("Ack(%d): %v", last, err)
	}
	fx.Close(t, src)

	src = fx.Open(t)
	defer fx.Close(t, src)
	s2 := msg("after-second-restart", "")
	commit(t, fx, s2)
	r = newReader(t, src, m1, m2, m3, s1)
	got = r.until(s.Wait, "after a second restart, the new transaction", s2)
	r.none("after everything before was acknowledged and the source restarted", got, m1, m2, m3, s1)
}

// testBury: a buried event is DEAD where operators look, with its reason,
// and is not delivered again; its transaction's other event is not DEAD.
func (s Suite) testBury(t *testing.T) {
	fx := s.New(t)
	src := fx.Open(t)
	bad, good := msg("buried", "k"), msg("delivered", "k")
	commit(t, fx, bad, good)
	r := newReader(t, src)
	got := r.until(s.Wait, "one transaction", bad, good)
	var ev outbox.Event
	for _, e := range got {
		if e.EventID == bad.EventID {
			ev = e
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.Wait)
	defer cancel()
	const reason = "sourcetest: refused for good; fix the payload and requeue it"
	p := r.pos(good)
	if err := src.Bury(ctx, []source.Burial{{Event: ev, Pos: r.pos(bad), Attempts: 3, Reason: reason}}); err != nil {
		t.Fatalf("Bury: %v", err)
	}
	if err := src.Ack(ctx, p); err != nil {
		t.Fatalf("Ack(%d) after Bury: %v", p, err)
	}
	check := func(when string) {
		t.Helper()
		dead := fx.Dead(t)
		n := 0
		for _, d := range dead {
			switch d.EventID {
			case bad.EventID:
				n++
				if !strings.Contains(d.Reason, reason) {
					t.Errorf("%s: the buried event is DEAD with reason %q; want it to contain %q", when, d.Reason, reason)
				}
			case good.EventID:
				t.Errorf("%s: the delivered event of the buried one's transaction is DEAD too", when)
			}
		}
		if n != 1 {
			t.Errorf("%s: the buried event is DEAD %d times where operators look (%d DEAD in all); want once", when, n, len(dead))
		}
	}
	check("after Bury and Ack")
	fx.Close(t, src)
	src = fx.Open(t)
	defer fx.Close(t, src)
	next := msg("after-restart", "k")
	commit(t, fx, next)
	r = newReader(t, src, bad, good)
	got = r.until(s.Wait, "after a restart, a new transaction", next)
	r.none("after Bury, Ack and a restart", got, bad, good)
	check("after a restart")
}

// testFenced: after a takeover, Bury refuses with ErrFenced and writes
// nothing; Ack refuses with ErrFenced or has nothing to write.
func (s Suite) testFenced(t *testing.T) {
	fx := s.New(t)
	tk, ok := fx.(Takeover)
	if !ok {
		t.Log("the source holds no leases (its Fixture does not implement Takeover); nothing to fence")
		return
	}
	src := fx.Open(t)
	defer fx.Close(t, src)
	m := msg("held", "k")
	commit(t, fx, m)
	r := newReader(t, src)
	got := r.until(s.Wait, "one transaction", m)
	tk.Takeover(t, src)
	ctx, cancel := context.WithTimeout(context.Background(), s.Wait)
	defer cancel()
	err := src.Bury(ctx, []source.Burial{{Event: got[0], Pos: r.pos(m), Attempts: 1, Reason: "sourcetest: buried by a fenced source"}})
	if !errors.Is(err, source.ErrFenced) {
		t.Fatalf("Bury after a takeover: %v; want source.ErrFenced", err)
	}
	if slices.ContainsFunc(fx.Dead(t), func(d Dead) bool { return d.EventID == m.EventID }) {
		t.Fatal("a fenced source's Bury made the event DEAD")
	}
	if err := src.Ack(ctx, r.pos(m)); err != nil && !errors.Is(err, source.ErrFenced) {
		t.Fatalf("Ack after a takeover: %v; want nil (nothing to write) or source.ErrFenced", err)
	}
}

// testNextCancel: Next returns the context's error when it ends, whether
// it ended before the call or during it.
func (s Suite) testNextCancel(t *testing.T) {
	fx := s.New(t)
	src := fx.Open(t)
	defer fx.Close(t, src)
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"cancelled before the call", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}},
		{"deadline during the call", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 300*time.Millisecond)
		}},
	} {
		// a source may report positions with no events: read past those
		deadline := time.Now().Add(s.Wait)
		for {
			ctx, cancel := c.ctx()
			start := time.Now()
			txns, err := src.Next(ctx)
			took := time.Since(start)
			cancel()
			if err != nil {
				if !errors.Is(err, ctx.Err()) {
					t.Fatalf("%s: Next: %v; want the context's error (%v)", c.name, err, ctx.Err())
				}
				if took > 5*time.Second {
					t.Fatalf("%s: Next took %s to notice the context ended", c.name, took)
				}
				break
			}
			for _, tx := range txns {
				if len(tx.Events) > 0 {
					t.Fatalf("%s: Next returned events although none were written", c.name)
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: Next kept returning empty transactions for %s and never the context's error", c.name, s.Wait)
			}
		}
	}
}
