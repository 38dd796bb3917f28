package relay_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// hookedClaims is a real store whose Claim runs before ahead of the
// real claim and after behind it (each when set), in the relay's claim
// goroutine: a test can hold a claim in the store's round trip.
type hookedClaims struct {
	driver.Store
	own    driver.Driver
	before func(ctx context.Context)
	after  func(ctx context.Context, c driver.Claim)
}

func (s *hookedClaims) Balance(ctx context.Context, req driver.BalanceParams) (driver.Ownership, error) {
	return s.own.Balance(ctx, req)
}

func (s *hookedClaims) Claim(ctx context.Context, req driver.ClaimParams) (driver.Claim, error) {
	if s.before != nil {
		s.before(ctx)
	}
	c, err := s.own.Claim(ctx, req)
	if s.after != nil && err == nil {
		s.after(ctx, c)
	}
	return c, err
}

// gatedBroker is a membroker whose first call that carries the event with
// payload target closes entered and waits until gate is closed (or the
// call's context ends); then it fails that event with a transient error
// when fail is set, and publishes the call's other events.
type gatedBroker struct {
	mb      *membroker.Broker
	target  string
	fail    bool
	entered chan struct{}
	gate    chan struct{}
	used    atomic.Bool
}

func newGatedBroker(t *testing.T, target string, fail bool) *gatedBroker {
	return &gatedBroker{mb: newMem(t, membroker.Config{}), target: target, fail: fail,
		entered: make(chan struct{}), gate: make(chan struct{})}
}

func (g *gatedBroker) Close(ctx context.Context) error { return g.mb.Close(ctx) }

func (g *gatedBroker) Publish(ctx context.Context, events []outbox.Event) []error {
	at := -1
	for i, e := range events {
		if string(e.Payload) == g.target {
			at = i
		}
	}
	if at < 0 || !g.used.CompareAndSwap(false, true) {
		return g.mb.Publish(ctx, events)
	}
	close(g.entered)
	select {
	case <-g.gate:
	case <-ctx.Done():
	}
	if !g.fail {
		return g.mb.Publish(ctx, events)
	}
	rest := append(append([]outbox.Event(nil), events[:at]...), events[at+1:]...)
	errs := g.mb.Publish(ctx, rest)
	errs = append(errs[:at:at], append([]error{errors.New("gated: timeout")}, errs[at:]...)...)
	return errs
}

// signal closes its channel on the first call of fire.
type signal struct {
	once sync.Once
	ch   chan struct{}
}

func newSignal() *signal { return &signal{ch: make(chan struct{})} }

func (s *signal) fire() { s.once.Do(func() { close(s.ch) }) }

// await reports whether the signal fired within d.
func (s *signal) await(d time.Duration) bool {
	select {
	case <-s.ch:
		return true
	case <-time.After(d):
	}
	select {
	case <-s.ch:
		return true
	default:
		return false
	}
}

// goodBeats counts the heartbeats that succeeded.
type goodBeats struct{ n atomic.Int64 }

func (g *goodBeats) OnShards(_ context.Context, s relay.ShardInfo) {
	if s.Err == nil {
		g.n.Add(1)
	}
}

// settledWith fires its signal when a batch settles with a delivered (or,
// retried set, a retried) event.
type settledWith struct {
	retried bool
	sig     *signal
}

func (h settledWith) OnSettle(_ context.Context, r relay.BatchReport) {
	if (h.retried && r.Retried > 0) || (!h.retried && r.Delivered > 0) {
		h.sig.fire()
	}
}

// A heartbeat and Health do not wait for a claim in the store's round
// trip (a claim held there, as on a loaded database): the heartbeat
// renews the shard leases meanwhile. Before the fix the claim held the
// ownership lock across its round trip, and the heartbeat waited for it
// (to list the drained shards) as did Health (the shard counts).
func TestOwnedHeartbeatDoesNotWaitForAClaim(t *testing.T) {
	forEachOpened(t, func(t *testing.T, o teststores.Opened) {
		entered, gate := newSignal(), make(chan struct{})
		var armed atomic.Bool
		armed.Store(true)
		st := &hookedClaims{Store: o.Store, own: o.Store}
		st.before = func(ctx context.Context) {
			if armed.CompareAndSwap(true, false) {
				entered.fire()
				select {
				case <-gate:
				case <-ctx.Done():
				}
			}
		}
		opened := false
		open := func() {
			if !opened {
				opened = true
				close(gate)
			}
		}
		defer open()
		mb := newMem(t, membroker.Config{})
		beats := &goodBeats{}
		cfg := fastConfig()
		cfg.LeaseFor = 3 * time.Second // a heartbeat every second; the claim's context ends after 5 s
		cfg.Workers = 1
		cfg.Hooks = []relay.Hook{beats}
		cfg.Logger = failureLog(t)
		r, _ := run(t, st, mb, cfg)
		if !entered.await(30 * time.Second) {
			t.Fatal("no claim reached the store")
		}
		n := beats.n.Load()
		health := newSignal()
		go func() {
			r.Health()
			health.fire()
		}()
		// both within 3 s, before the claim's context ends
		deadline := time.Now().Add(3 * time.Second)
		for beats.n.Load() == n && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if beats.n.Load() == n {
			t.Error("no heartbeat in 3 s while a claim was in the store: the heartbeat waited for it")
		}
		if !health.await(0) {
			t.Error("Health waited for the claim in the store")
		}
		open()
		msgs := []outbox.Message{{Topic: "t", Key: "k", Type: "T", Payload: []byte("k#1")}}
		if err := o.Store.Enqueue(context.Background(), msgs...); err != nil {
			t.Fatal(err)
		}
		r.Wake()
		waitFor(t, "delivery", 30*time.Second, func() bool { return len(mb.Events("t")) >= 1 })
		checkDelivered(t, msgs, mb.Events("t"))
	})
}

// A batch's settle does not wait for another worker's claim in the store's
// round trip: its outcomes are written and its keys' chains closed (or
// queued for the end of that claim) at once. Before the fix settled took
// the ownership lock, which the claim held across its round trip.
func TestOwnedSettleDoesNotWaitForAClaim(t *testing.T) {
	forEachOpened(t, func(t *testing.T, o teststores.Opened) {
		gb := newGatedBroker(t, "a#1", false)
		claimIn, claimGate := newSignal(), make(chan struct{})
		var armed atomic.Bool
		st := &hookedClaims{Store: o.Store, own: o.Store}
		st.before = func(ctx context.Context) {
			if armed.CompareAndSwap(true, false) {
				claimIn.fire()
				select {
				case <-claimGate:
				case <-ctx.Done():
				}
			}
		}
		var once sync.Once
		release := func() { once.Do(func() { close(claimGate) }) }
		defer release()
		settled := newSignal()
		cfg := fastConfig()
		cfg.Workers = 2 // one publishes a#1 while the other claims
		cfg.LeaseFor = 3 * time.Second
		cfg.Hooks = []relay.Hook{settledWith{sig: settled}}
		cfg.Logger = failureLog(t)
		msgs := []outbox.Message{{Topic: "t", Key: "a", Type: "T", Payload: []byte("a#1")}}
		if err := o.Store.Enqueue(context.Background(), msgs...); err != nil {
			t.Fatal(err)
		}
		run(t, st, gb, cfg)
		select {
		case <-gb.entered:
		case <-time.After(30 * time.Second):
			t.Fatal("a#1 was not published")
		}
		armed.Store(true)
		if !claimIn.await(30 * time.Second) {
			t.Fatal("no claim reached the store while a#1 was in flight")
		}
		close(gb.gate) // a#1 is confirmed; its batch settles while the claim waits
		if !settled.await(3 * time.Second) {
			t.Fatal("a#1's batch did not settle within 3 s while a claim was in the store: the settle waited for it")
		}
		release()
		waitFor(t, "the table to empty", 30*time.Second, func() bool { return pending(t, o.Store).Pending() == 0 })
		checkDelivered(t, msgs, gb.mb.Events("t"))
	})
}

// A claim whose snapshot predates the retry of a key's event e1 (written
// NEW with a later next attempt while the claim is in the store) may take
// the key's next event e2: the store does not let a relay's own claims
// hold its keys, and e1 was still leased to this relay. e2 must wait
// behind e1 (and be released, untried), not find the key forgotten by
// e1's settle, which ran meanwhile. Ordering by ownership held the lock
// across the claim, so the settle waited; with claims outside the lock,
// the settle's closing of e1's ticket waits for the end of such a claim.
func TestOwnedOrderKeptWhenARetryIsSettledDuringAClaim(t *testing.T) {
	forEachOpened(t, func(t *testing.T, o teststores.Opened) {
		ctx := context.Background()
		gb := newGatedBroker(t, "k#1", true)
		settled := newSignal()
		var took, overlapped atomic.Bool
		st := &hookedClaims{Store: o.Store, own: o.Store}
		st.after = func(_ context.Context, c driver.Claim) {
			for _, e := range c.Events {
				if string(e.Payload) != "k#2" || !took.CompareAndSwap(false, true) {
					continue
				}
				// the claim's snapshot had k#1 still in flight: now fail
				// it, and let its settle (the retry written) run before
				// this claim returns (a relay whose settles wait for its
				// claims lets this wait time out)
				close(gb.gate)
				overlapped.Store(settled.await(2 * time.Second))
			}
		}
		cfg := fastConfig()
		cfg.Workers = 2
		cfg.LeaseFor = 5 * time.Second
		cfg.Hooks = []relay.Hook{settledWith{retried: true, sig: settled}}
		cfg.Logger = failureLog(t)
		msgs := []outbox.Message{
			{Topic: "t", Key: "k", Type: "T", Payload: []byte("k#1")},
			{Topic: "t", Key: "k", Type: "T", Payload: []byte("k#2")},
		}
		if err := o.Store.Enqueue(ctx, msgs[0]); err != nil {
			t.Fatal(err)
		}
		r, _ := run(t, st, gb, cfg)
		select {
		case <-gb.entered:
		case <-time.After(30 * time.Second):
			t.Fatal("k#1 was not published")
		}
		if err := o.Store.Enqueue(ctx, msgs[1]); err != nil {
			t.Fatal(err)
		}
		r.Wake()
		waitFor(t, "the table to empty", time.Minute, func() bool { return pending(t, o.Store).Pending() == 0 })
		if !took.Load() {
			t.Fatal("no claim took k#2 while k#1 was in flight: the test did not set up its case")
		}
		t.Logf("k#1's retry settled during the claim that took k#2: %v", overlapped.Load())
		checkDelivered(t, msgs, gb.mb.Events("t"))
	})
}

// While a claim is in the store's round trip and another waits to start
// after it, a third worker's claim is not made: the waiting one starts
// later, so it takes everything the third would have, an event committed
// during the wait included. Before, every worker queued for the claim lock
// and each ran its claim in turn, two or three back to back, all but the
// first finding little (at a steady 1,000 events/s this queue was often two
// deep behind a slow claim).
func TestOwnedClaimsQueueOneDeep(t *testing.T) {
	forEachOpened(t, func(t *testing.T, o teststores.Opened) {
		var calls atomic.Int32
		var hold atomic.Bool
		var entered *signal
		var gate chan struct{}
		var mu sync.Mutex
		var starts, ends []time.Time
		st := &hookedClaims{Store: o.Store, own: o.Store}
		st.after = func(ctx context.Context, c driver.Claim) {
			mu.Lock()
			ends = append(ends, time.Now())
			mu.Unlock()
		}
		st.before = func(ctx context.Context) {
			calls.Add(1)
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			if hold.CompareAndSwap(true, false) {
				entered.fire()
				select {
				case <-gate:
				case <-ctx.Done():
				}
			}
		}
		cfg := fastConfig()
		cfg.Workers = 3
		cfg.PollInterval = 30 * time.Second // no claim but those the test wakes
		cfg.LeaseFor = 30 * time.Second     // and no heartbeat (every LeaseFor/3) during the test
		mb := newMem(t, membroker.Config{})
		r, _ := run(t, st, mb, cfg)
		// The first Balance and the empty rounds after it are over once no
		// claim has started for 300 ms.
		deadline := time.Now().Add(10 * time.Second)
		for last := int32(-1); ; {
			time.Sleep(300 * time.Millisecond)
			n := calls.Load()
			if n == last && n > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("claims still starting after 10 s (%d)", n)
			}
			last = n
		}
		// holdThree holds one claim in the store while two more workers
		// are woken, then lets it go; during the hold it runs during.
		holdThree := func(during func()) {
			entered, gate = newSignal(), make(chan struct{})
			hold.Store(true)
			r.Wake()
			if !entered.await(5 * time.Second) {
				t.Fatal("no claim reached the store within 5 s of a wake-up")
			}
			r.Wake() // a second worker: waits for the first
			time.Sleep(100 * time.Millisecond)
			during()
			r.Wake() // a third: another waits already
			time.Sleep(100 * time.Millisecond)
			close(gate)
		}
		holdThree(func() {})
		released := time.Now()
		time.Sleep(500 * time.Millisecond)
		// The claims that started from the release until 5 ms after the
		// held claim returned: only the one that waited for it. (Before,
		// the third worker's claim followed that one at once; later claims
		// are the workers' looks again, 10 ms and more after an empty
		// round.)
		mu.Lock()
		var firstEnd time.Time
		for _, e := range ends {
			if e.After(released) {
				firstEnd = e
				break
			}
		}
		n, since := 0, 0
		for _, st := range starts {
			if st.After(released) {
				since++
				if !firstEnd.IsZero() && st.Before(firstEnd.Add(5*time.Millisecond)) {
					n++
				}
			}
		}
		mu.Unlock()
		if firstEnd.IsZero() || n != 1 {
			t.Fatalf("%d claims started right after the held claim returned (%d in the 500 ms since it was released); want 1: the one that waited for it, the third worker's not made", n, since)
		}
		// An event committed during the held claim: the waiting claim
		// takes it (the skipped one is not needed for it).
		holdThree(func() {
			if err := o.Store.Enqueue(context.Background(), outbox.Message{Topic: "t", Key: "k", Type: "T", Payload: []byte(`"late"`)}); err != nil {
				t.Fatal(err)
			}
		})
		waitFor(t, "the event committed during the held claim, long before the 30 s poll", 5*time.Second, func() bool { return len(mb.Events("t")) == 1 })
	})
}
