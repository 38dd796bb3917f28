package relay_test

import (
	"errors"
	"fmt"
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
			if n := len(src.buriedEvents()); n != 0 {
				t.Fatalf("%d events buried", n)
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

func TestSourcePermanentAndOutOfAttemptsAreBuried(t *testing.T) {
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
	p := src.buriedEvents()
	if len(p) != 2 || p[0].Event.ID != 1 || p[0].Attempts != 1 || p[1].Event.ID != 3 || p[1].Attempts != 3 || p[0].Pos != 10 || p[1].Pos != 20 {
		t.Fatalf("buried %+v", p)
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

// A key's event read while its previous one is still in a publish call
// (an earlier set) waits for that call's outcome: it goes only after the
// previous one is confirmed and, when that one failed, it is released
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

// An event released untried (it waited in a later set for its key's
// event in flight, which failed) is in a settle report as Released, so
// that the reports add up to every event handed out.
func TestSourceReleasedIsSettledAsHeld(t *testing.T) {
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
