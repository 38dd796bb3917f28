package relay_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/source"
)

// memSource is a Source over transactions given up front.
type memSource struct {
	mu     sync.Mutex
	txns   []source.Txn
	acked  []source.Position
	parked []source.Parked
	wake   chan struct{}
	nexts  atomic.Int64 // calls of Next: the reader calls again once the loop took the last read
}

func newMemSource(txns ...source.Txn) *memSource {
	return &memSource{txns: txns, wake: make(chan struct{}, 1)}
}

func (s *memSource) add(txns ...source.Txn) {
	s.mu.Lock()
	s.txns = append(s.txns, txns...)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *memSource) Next(ctx context.Context) ([]source.Txn, error) {
	s.nexts.Add(1)
	for {
		s.mu.Lock()
		if len(s.txns) > 0 {
			out := s.txns
			s.txns = nil
			s.mu.Unlock()
			return out, nil
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.wake:
		}
	}
}

func (s *memSource) Ack(_ context.Context, pos source.Position) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acked = append(s.acked, pos)
	return nil
}

func (s *memSource) Park(_ context.Context, p []source.Parked) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.parked = append(s.parked, p...)
	return nil
}

func (s *memSource) lastAck() source.Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.acked) == 0 {
		return 0
	}
	return s.acked[len(s.acked)-1]
}

func (s *memSource) parkedEvents() []source.Parked {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]source.Parked(nil), s.parked...)
}

var nextID int64

// txn builds a transaction at pos with one event per key given.
func txn(pos source.Position, keys ...string) source.Txn {
	t := source.Txn{Pos: pos}
	for _, k := range keys {
		nextID++
		t.Events = append(t.Events, outbox.Event{ID: nextID, Message: outbox.Message{
			EventID: outbox.NewEventID(), Topic: "t", Key: k, Type: "T", Payload: []byte(fmt.Sprint(nextID)),
			SchemaVersion: 1, ContentType: outbox.DefaultContentType}})
	}
	return t
}

func fast(cfg relay.Config) relay.Config {
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase = 5 * time.Millisecond
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = 20 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	return cfg
}

// sourceTotals are a relay's Totals, read once.
type sourceTotals struct{ Delivered, Retried, Dead int64 }

func totals(r *relay.Relay) sourceTotals {
	t := r.Totals()
	return sourceTotals{Delivered: t.Delivered.Load(), Retried: t.Retried.Load(), Dead: t.Dead.Load()}
}

// claimHook and settleHook are hooks made of a function.
type claimHook func(relay.ClaimInfo)

func (h claimHook) OnClaim(_ context.Context, c relay.ClaimInfo) { h(c) }

type settleHook func(relay.BatchReport)

func (h settleHook) OnSettle(_ context.Context, r relay.BatchReport) { h(r) }

// startSource runs a relay over src until the test ends.
func startSource(t *testing.T, src source.Source, b broker.Broker, cfg relay.Config) *relay.Relay {
	t.Helper()
	l, err := relay.NewSource(src, b, fast(cfg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return l
}

func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// checkOrder fails unless, per key, the first deliveries come in id order.
func checkOrder(t *testing.T, got []outbox.Event) {
	t.Helper()
	last := map[string]int64{}
	seen := map[int64]bool{}
	for _, e := range got {
		if seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		if e.Key != "" && e.ID < last[e.Key] {
			t.Fatalf("key %s: event %d delivered after %d", e.Key, e.ID, last[e.Key])
		}
		last[e.Key] = e.ID
	}
}

func newBroker(t *testing.T, cfg membroker.Config) *membroker.Broker {
	b, err := membroker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSourceOrderPerKeyWithRetries(t *testing.T) {
	for _, keyOrdered := range []bool{false, true} {
		t.Run(fmt.Sprint("keyOrdered=", keyOrdered), func(t *testing.T) {
			b := newBroker(t, membroker.Config{KeyOrdered: keyOrdered})
			var mu sync.Mutex
			fails := map[string]int{} // event id → failures so far
			b.SetHook(func(e outbox.Event) error {
				mu.Lock()
				defer mu.Unlock()
				if e.ID%7 == 0 && fails[e.EventID] < 3 {
					fails[e.EventID]++
					return errors.New("transient")
				}
				return nil
			})
			src := newMemSource()
			var want int
			for p := 1; p <= 200; p++ {
				src.add(txn(source.Position(p), fmt.Sprint("k", p%5), fmt.Sprint("k", (p+1)%5), ""))
				want += 3
			}
			l := startSource(t, src, b, relay.Config{BatchSize: 16})
			await(t, "all delivered", func() bool { return totals(l).Delivered == int64(want) })
			checkOrder(t, b.Events(""))
			await(t, "ack of the last position", func() bool { return src.lastAck() == 200 })
			if n := len(src.parkedEvents()); n != 0 {
				t.Fatalf("%d events parked", n)
			}
		})
	}
}

func TestSourceFailingKeyHoldsOnlyItself(t *testing.T) {
	b := newBroker(t, membroker.Config{})
	b.SetHook(func(e outbox.Event) error {
		if e.Key == "poison" {
			return errors.New("always fails")
		}
		return nil
	})
	src := newMemSource(txn(1, "poison", "a"), txn(2, "poison", "b"), txn(3, "c"))
	l := startSource(t, src, b, relay.Config{MaxAttempts: 1000, BackoffBase: 50 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	await(t, "the other keys", func() bool { return totals(l).Delivered == 3 })
	time.Sleep(100 * time.Millisecond)
	if a := src.lastAck(); a != 0 {
		t.Fatalf("acked %d past the unsettled poison events", a)
	}
	if got := len(b.Events("")); got != 3 {
		t.Fatalf("%d delivered, want 3", got)
	}
}

func TestSourcePermanentAndOutOfAttemptsArePark(t *testing.T) {
	b := newBroker(t, membroker.Config{})
	b.SetHook(func(e outbox.Event) error {
		switch string(e.Payload) {
		case "1":
			return broker.Permanentf("rejected for good")
		case "3":
			return errors.New("transient")
		}
		return nil
	})
	nextID = 0
	src := newMemSource(txn(10, "k", "k"), txn(20, "j", "j"))
	l := startSource(t, src, b, relay.Config{MaxAttempts: 3})
	await(t, "settled", func() bool { return src.lastAck() == 20 })
	p := src.parkedEvents()
	if len(p) != 2 || p[0].Event.ID != 1 || p[0].Attempts != 1 || p[1].Event.ID != 3 || p[1].Attempts != 3 || p[0].Pos != 10 || p[1].Pos != 20 {
		t.Fatalf("parked %+v", p)
	}
	if tot := totals(l); tot.Delivered != 2 || tot.Dead != 2 || tot.Retried != 2 {
		t.Fatalf("totals %+v", tot)
	}
	// a DEAD event does not hold its key: 2 and 4 were delivered after it
	got := b.Events("")
	if len(got) != 2 || got[0].ID+got[1].ID != 6 {
		t.Fatalf("delivered %v", got)
	}
}

func TestSourceUnavailableCostsNoAttempts(t *testing.T) {
	b := newBroker(t, membroker.Config{})
	b.SetDown(true)
	src := newMemSource(txn(1, "a", "b", ""), txn(2, "a"))
	l := startSource(t, src, b, relay.Config{MaxAttempts: 2})
	time.Sleep(300 * time.Millisecond) // many rounds of backoff at 5-20 ms
	if tot := totals(l); tot.Dead != 0 || tot.Retried != 0 || tot.Delivered != 0 {
		t.Fatalf("during the outage: %+v", tot)
	}
	b.SetDown(false)
	await(t, "delivery after the outage", func() bool { return src.lastAck() == 2 })
	for _, e := range b.Events("") {
		if e.Attempts != 0 {
			t.Fatalf("event %d carries %d attempts", e.ID, e.Attempts)
		}
	}
}

// On a key-ordered broker the loop sends a key's events in one call; the
// ones after a failure are held back and must not be charged an attempt.
func TestSourceHeldBehindFailureNotCounted(t *testing.T) {
	b := newBroker(t, membroker.Config{KeyOrdered: true})
	var mu sync.Mutex
	failed := 0
	nextID = 0
	b.SetHook(func(e outbox.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if e.ID == 1 && failed < 2 {
			failed++
			return errors.New("transient")
		}
		return nil
	})
	src := newMemSource(txn(1, "k", "k", "k"))
	l := startSource(t, src, b, relay.Config{MaxAttempts: 3})
	await(t, "delivered", func() bool { return src.lastAck() == 1 })
	got := b.Events("")
	if len(got) != 3 {
		t.Fatalf("delivered %d", len(got))
	}
	for i, e := range got {
		if e.ID != int64(i+1) {
			t.Fatalf("order %v", got)
		}
		want := 0
		if e.ID == 1 {
			want = 2
		}
		if e.Attempts != want {
			t.Fatalf("event %d went out with %d attempts, want %d", e.ID, e.Attempts, want)
		}
	}
	if tot := totals(l); tot.Retried != 2 || tot.Dead != 0 {
		t.Fatalf("totals %+v", tot)
	}
}

// The acknowledged position never passes an unsettled transaction, and
// empty transactions advance it.
func TestSourceAckStopsAtUnsettled(t *testing.T) {
	b := newBroker(t, membroker.Config{})
	var mu sync.Mutex
	block := true
	b.SetHook(func(e outbox.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if e.Key == "slow" && block {
			return errors.New("not yet")
		}
		return nil
	})
	src := newMemSource(txn(1, "a"), txn(2), txn(3, "slow"), txn(4, "b"), txn(5))
	l := startSource(t, src, b, relay.Config{MaxAttempts: 1000})
	await(t, "ack of 2", func() bool { return src.lastAck() == 2 })
	await(t, "b", func() bool { return totals(l).Delivered == 2 })
	time.Sleep(100 * time.Millisecond)
	if a := src.lastAck(); a != 2 {
		t.Fatalf("acked %d", a)
	}
	mu.Lock()
	block = false
	mu.Unlock()
	await(t, "ack of 5", func() bool { return src.lastAck() == 5 })
}

// A delayed event (AvailableAt) waits for its time and holds its key; the
// other keys flow.
func TestSourceAvailableAtDelaysAndHoldsKey(t *testing.T) {
	b := newBroker(t, membroker.Config{})
	src := newMemSource()
	late := txn(1, "k", "k")
	late.Events[0].AvailableAt = time.Now().Add(400 * time.Millisecond)
	src.add(late, txn(2, "j"))
	l := startSource(t, src, b, relay.Config{})
	await(t, "the other key", func() bool { return totals(l).Delivered == 1 })
	if got := b.Events(""); got[0].Key != "j" {
		t.Fatalf("delivered %v first", got[0])
	}
	time.Sleep(200 * time.Millisecond)
	if n := totals(l).Delivered; n != 1 {
		t.Fatalf("%d delivered before the delayed event's time", n)
	}
	await(t, "the delayed key", func() bool { return src.lastAck() == 2 })
	got := b.Events("")
	if len(got) != 3 || got[1].ID > got[2].ID {
		t.Fatalf("delivered %v", got)
	}
}

// gate is a broker that holds the calls carrying event hold until open is
// closed, and logs which events each call carried, when it started.
type gate struct {
	*membroker.Broker
	hold    int64
	entered chan struct{}
	open    chan struct{}
	mu      sync.Mutex
	starts  [][]int64
}

func (g *gate) PublishResults(ctx context.Context, evs []outbox.Event) []broker.Result {
	ids := make([]int64, len(evs))
	held := false
	for i, e := range evs {
		ids[i] = e.ID
		held = held || e.ID == g.hold
	}
	g.mu.Lock()
	g.starts = append(g.starts, ids)
	g.mu.Unlock()
	if held {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		select {
		case <-g.open:
		case <-ctx.Done():
		}
	}
	return g.Broker.PublishResults(ctx, evs)
}

func (g *gate) Publish(ctx context.Context, evs []outbox.Event) []error {
	return errsOf(g.PublishResults(ctx, evs))
}

// errsOf is each result's error, for a Publish built on PublishResults.
func errsOf(res []broker.Result) []error {
	errs := make([]error, len(res))
	for i := range res {
		errs[i] = res[i].Err
	}
	return errs
}

// callOf returns the first call that carried event id.
func (g *gate) callOf(id int64) []int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.starts {
		if slices.Contains(c, id) {
			return c
		}
	}
	return nil
}

// calls returns how many calls carried event id.
func (g *gate) calls(id int64) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, c := range g.starts {
		for _, x := range c {
			if x == id {
				n++
			}
		}
	}
	return n
}

// A key's event read while its previous one is still in a publish call
// (an earlier set) waits for that call's outcome: it goes only after the
// previous one is confirmed and, when that one failed, it is given back
// untried and goes after the retry. The other keys of the later read go
// at once.
func TestSourceKeyAcrossReadsWaitsForTheCallInFlight(t *testing.T) {
	for _, keyOrdered := range []bool{false, true} {
		for _, failFirst := range []bool{false, true} {
			t.Run(fmt.Sprintf("keyOrdered=%v/failFirst=%v", keyOrdered, failFirst), func(t *testing.T) {
				mb := newBroker(t, membroker.Config{KeyOrdered: keyOrdered})
				nextID = 0
				first := txn(1, "k") // event 1
				var mu sync.Mutex
				failed := false
				mb.SetHook(func(e outbox.Event) error {
					mu.Lock()
					defer mu.Unlock()
					if failFirst && e.ID == 1 && !failed {
						failed = true
						return errors.New("transient")
					}
					return nil
				})
				g := &gate{Broker: mb, hold: 1, entered: make(chan struct{}, 1), open: make(chan struct{})}
				src := newMemSource(first)
				l := startSource(t, src, g, relay.Config{})
				select {
				case <-g.entered:
				case <-time.After(20 * time.Second):
					t.Fatal("event 1 was not published")
				}
				src.add(txn(2, "k", "j")) // events 2 (k) and 3 (j)
				await(t, "the other key's event", func() bool {
					return slices.ContainsFunc(mb.Events(""), func(e outbox.Event) bool { return e.ID == 3 })
				})
				time.Sleep(50 * time.Millisecond)
				if n := g.calls(2); n != 0 {
					t.Fatalf("event 2 was published while event 1, before it on its key, was in flight")
				}
				close(g.open)
				await(t, "ack of 2", func() bool { return src.lastAck() == 2 })
				got := mb.Events("")
				checkOrder(t, got)
				if len(got) != 3 || got[0].ID != 3 {
					t.Fatalf("delivered %v", got)
				}
				for _, e := range got {
					want := 0
					if failFirst && e.ID == 1 {
						want = 1
					}
					if e.Attempts != want {
						t.Fatalf("event %d went out with %d attempts, want %d", e.ID, e.Attempts, want)
					}
				}
				if n := g.calls(2); n != 1 {
					t.Fatalf("event 2 was in %d calls, want 1 (it waited, untried, for event 1)", n)
				}
				var retried int64
				if failFirst {
					retried = 1
				}
				if tot := totals(l); tot.Delivered != 3 || tot.Dead != 0 || tot.Retried != retried {
					t.Fatalf("totals %+v", tot)
				}
			})
		}
	}
}

// On a key-ordered broker, a hot key's events read one at a time while
// its earlier ones are in flight do not go one call each: those that
// waited meanwhile go together, in one call.
func TestSourceHotKeyReadsGatherIntoOneCall(t *testing.T) {
	mb := newBroker(t, membroker.Config{KeyOrdered: true})
	g := &gate{Broker: mb, hold: 1, entered: make(chan struct{}, 1), open: make(chan struct{})}
	nextID = 0
	src := newMemSource(txn(1, "k"))
	var reads atomic.Int64
	startSource(t, src, g, relay.Config{Hooks: []relay.Hook{claimHook(func(c relay.ClaimInfo) {
		if c.Err == nil {
			reads.Add(1)
		}
	})}})
	select {
	case <-g.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("event 1 was not published")
	}
	for p := 2; p <= 5; p++ {
		src.add(txn(source.Position(p), "k")) // one read each
		await(t, "the read", func() bool { return reads.Load() == int64(p) })
		// the reader asks again only once the loop has taken the read
		await(t, "the loop to take the read", func() bool { return src.nexts.Load() >= int64(p+1) })
	}
	time.Sleep(20 * time.Millisecond)
	close(g.open)
	await(t, "ack of 5", func() bool { return src.lastAck() == 5 })
	checkOrder(t, mb.Events(""))
	if c := g.callOf(3); fmt.Sprint(c) != "[3 4 5]" && fmt.Sprint(c) != "[2 3 4 5]" {
		g.mu.Lock()
		defer g.mu.Unlock()
		t.Fatalf("calls %v: events 3, 4 and 5 did not go in one call", g.starts)
	}
}

// BenchmarkLoop: the loop's own cost per event, 100,000 events of 5,000
// keys in transactions of 100, through membroker.
//
//	go test -run XXX -bench Source -benchmem ./relay/
func BenchmarkSource(b *testing.B) {
	const n, perTxn = 100_000, 100
	txns := make([]source.Txn, 0, n/perTxn)
	for i := 0; i < n; i += perTxn {
		t := source.Txn{Pos: source.Position(i + 1)}
		for j := i; j < i+perTxn; j++ {
			t.Events = append(t.Events, outbox.Event{ID: int64(j + 1), Message: outbox.Message{EventID: outbox.NewEventID(), Topic: "t",
				Key: fmt.Sprint("k", j%5000), Type: "T", Payload: make([]byte, 200), SchemaVersion: 1, ContentType: outbox.DefaultContentType}})
		}
		txns = append(txns, t)
	}
	for i := 0; i < b.N; i++ {
		mb, _ := membroker.New(membroker.Config{})
		src := newMemSource(txns...)
		l, err := relay.NewSource(src, mb, relay.Config{BatchSize: 1000, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		for src.lastAck() != source.Position(n-perTxn+1) {
			time.Sleep(time.Millisecond)
		}
		cancel()
		<-done
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "ev/s")
}

// BenchmarkLoopHotKey: 2,000 events of one key, committed one per
// transaction every 100µs, through a key-ordered membroker that takes 1ms
// per call. To keep up, the loop must send the key's events that waited
// meanwhile together, in one call.
//
//	go test -run XXX -bench SourceHotKey ./relay/
func BenchmarkSourceHotKey(b *testing.B) {
	const n = 2000
	calls := 0
	for i := 0; i < b.N; i++ {
		mb, _ := membroker.New(membroker.Config{KeyOrdered: true, Latency: time.Millisecond})
		src := newMemSource()
		l, err := relay.NewSource(src, mb, relay.Config{Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		t0 := time.Now()
		for j := 1; j <= n; j++ {
			src.add(source.Txn{Pos: source.Position(j), Events: []outbox.Event{{ID: int64(j), Message: outbox.Message{EventID: outbox.NewEventID(),
				Topic: "t", Key: "hot", Type: "T", Payload: []byte("{}"), SchemaVersion: 1, ContentType: outbox.DefaultContentType}}}})
			for time.Since(t0) < time.Duration(j)*100*time.Microsecond {
				runtime.Gosched()
			}
		}
		for src.lastAck() != n {
			time.Sleep(time.Millisecond)
		}
		cancel()
		<-done
		calls += mb.Stats().Calls
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "ev/s")
	b.ReportMetric(float64(n)*float64(b.N)/float64(calls), "ev/call")
}

// unitBroker is a broker whose ordered unit is the call (a Kafka
// partition shared by every key): once an event fails, the later events
// of the call, whatever their key, are not sent (broker.ErrNotAttempted).
type unitBroker struct{ *membroker.Broker }

func (p unitBroker) Features() broker.Features {
	return broker.Features{Ordering: broker.OrderPartition}
}

func (p unitBroker) PublishResults(ctx context.Context, evs []outbox.Event) []broker.Result {
	out := make([]broker.Result, len(evs))
	failed := false
	for i := range evs {
		if failed {
			out[i].Err = fmt.Errorf("not sent behind a failure (%w)", broker.ErrNotAttempted)
			continue
		}
		out[i] = p.Broker.PublishResults(ctx, evs[i:i+1])[0]
		failed = out[i].Err != nil
	}
	return out
}

func (p unitBroker) Publish(ctx context.Context, evs []outbox.Event) []error {
	return errsOf(p.PublishResults(ctx, evs))
}

// An event the adapter did not send because another key's event failed
// before it in its ordered unit (ErrNotAttempted) goes again uncharged:
// with MaxAttempts 2 and two failures of key a, key b must not go DEAD.
func TestSourceNotAttemptedCostsNoAttempt(t *testing.T) {
	mb := newBroker(t, membroker.Config{})
	var mu sync.Mutex
	failed := 0
	nextID = 0
	mb.SetHook(func(e outbox.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if e.ID == 1 && failed < 3 {
			failed++
			return errors.New("transient")
		}
		return nil
	})
	src := newMemSource(txn(1, "a", "b", "b"))
	l := startSource(t, src, unitBroker{mb}, relay.Config{MaxAttempts: 4})
	await(t, "delivered", func() bool { return src.lastAck() == 1 })
	got := mb.Events("")
	if len(got) != 3 {
		t.Fatalf("delivered %d: %v", len(got), got)
	}
	var b []int64
	for _, e := range got {
		if e.Key == "b" {
			b = append(b, e.ID)
			if e.Attempts != 0 {
				t.Fatalf("event %d of key b went out with %d attempts, want 0", e.ID, e.Attempts)
			}
		}
	}
	if !slices.Equal(b, []int64{2, 3}) {
		t.Fatalf("key b's order %v", b)
	}
	if tot := totals(l); tot.Dead != 0 || tot.Retried != 3 {
		t.Fatalf("totals %+v, want 3 retries (key a's) and none dead", tot)
	}
}

// An event given back untried (it waited in a later set for its key's
// event in flight, which failed) is in a settle report as Released, so
// that the reports add up to every event handed out.
func TestSourceGivenBackUntriedIsSettledAsHeld(t *testing.T) {
	mb := newBroker(t, membroker.Config{})
	nextID = 0
	var failed atomic.Bool
	mb.SetHook(func(e outbox.Event) error {
		if e.ID == 1 && failed.CompareAndSwap(false, true) {
			return errors.New("transient")
		}
		return nil
	})
	var mu sync.Mutex
	var sum relay.BatchReport
	g := &gate{Broker: mb, hold: 1, entered: make(chan struct{}, 1), open: make(chan struct{})}
	src := newMemSource(txn(1, "k"))
	startSource(t, src, g, relay.Config{Hooks: []relay.Hook{settleHook(func(s relay.BatchReport) {
		mu.Lock()
		sum.Claimed += s.Claimed
		sum.Delivered += s.Delivered
		sum.Retried += s.Retried
		sum.Dead += s.Dead
		sum.Released += s.Released
		mu.Unlock()
	})}})
	<-g.entered
	src.add(txn(2, "k"))
	time.Sleep(30 * time.Millisecond) // event 2 is read and waits for event 1
	close(g.open)
	await(t, "ack of 2", func() bool { return src.lastAck() == 2 })
	mu.Lock()
	defer mu.Unlock()
	if sum.Released == 0 || sum.Retried != 1 || sum.Delivered != 2 {
		t.Errorf("settled %+v; want event 1 retried once, both delivered, and event 2's give-back counted as released", sum)
	}
	if sum.Claimed != sum.Delivered+sum.Retried+sum.Released+sum.Dead {
		t.Errorf("settled %+v: the outcomes do not add up to the events", sum)
	}
}
