package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/source"
)

// A relay over a source.Source tells its hooks, Health and Totals what a
// store's relay tells them.
func TestNewSourceHooksAndHealth(t *testing.T) {
	mb := newMem(t, membroker.Config{})
	mb.SetHook(func(e outbox.Event) error {
		if e.Type == "Poison" {
			return broker.Permanent(errors.New("rejected"))
		}
		return nil
	})
	src := newMemSource()
	rec := &recorder{}
	cfg := fastConfig()
	cfg.Hooks = []relay.Hook{rec}
	r, err := relay.NewSource(src, mb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	first := txn(1, "ka", "kb", "kc", "kd", "ke", "kf", "kg", "kh", "ki", "kj")
	first.Events[3].Type = "Poison"
	src.add(first)
	waitFor(t, "nine delivered, one dead", 20*time.Second, func() bool {
		s := rec.snapshot()
		return s.settled.Delivered == 9 && s.settled.Dead == 1
	})
	s := rec.snapshot()
	if s.claimedEvents != 10 || s.confirmed != 9 || s.failed != 1 || s.settled.Claimed != 10 {
		t.Errorf("hooks saw %+v: want 10 claimed, 9 confirmed, 1 failed", s)
	}
	if s.spanMissing != 0 || s.spanSeen == 0 {
		t.Errorf("OnPublishEnd got the context of OnPublishStart %d times, another %d times", s.spanSeen, s.spanMissing)
	}
	h := r.Health()
	if h.LastDelivered.IsZero() || h.Delivered != 9 || h.Dead != 1 || h.InFlight != 0 || h.LastClaim.IsZero() || h.Claimed != 10 {
		t.Errorf("health after delivery = %+v", h)
	}
	waitFor(t, "the source acknowledged, the DEAD event parked", 10*time.Second, func() bool {
		return src.lastAck() == 1 && len(src.parkedEvents()) == 1
	})

	mb.SetDown(true)
	src.add(txn(2, "late"))
	waitFor(t, "the broker reported failing", 10*time.Second, func() bool { return r.Health().BrokerError != "" })
	if h := r.Health(); h.BrokerFailingSince.IsZero() || !strings.Contains(h.BrokerError, "down") {
		t.Errorf("health while the broker is down = %+v", h)
	}
	time.Sleep(300 * time.Millisecond)
	mb.SetDown(false)
	waitFor(t, "the broker recovered", 10*time.Second, func() bool { return r.Health().BrokerError == "" && r.Health().Delivered == 10 })
	if got := rec.snapshot().health; strings.Join(got, ",") != "broker failing,broker recovered" {
		t.Errorf("health transitions = %v, want one failing and one recovered", got)
	}
	if s := rec.snapshot(); s.renewed != 0 || s.lost != 0 {
		t.Errorf("HookLease was called (%d renewed, %d lost); a source fences itself", s.renewed, s.lost)
	}
}

func TestNewSourceRefusesBadInput(t *testing.T) {
	if _, err := relay.NewSource(nil, newMem(t, membroker.Config{}), relay.Config{}); err == nil {
		t.Fatal("NewSource(nil, …): no error")
	}
	var src source.Source = newMemSource()
	for _, c := range []struct {
		cfg  relay.Config
		want string
	}{
		{relay.Config{MaxAttempts: -1}, "MaxAttempts"},
		{relay.Config{Workers: -1}, "Workers"},
		{relay.Config{BackoffBase: time.Minute, BackoffMax: time.Second}, "BackoffMax"},
	} {
		if _, err := relay.NewSource(src, newMem(t, membroker.Config{}), c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewSource with %+v: %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
}

// A source's events go through the store relay's publish call: a broker
// that declares MaxInFlight gets no more events at once than that, across
// all publish calls, and each call is cut to fit it.
func TestSourceHonoursTheBrokersInFlightWindow(t *testing.T) {
	mb := newMem(t, membroker.Config{MaxInFlight: 4, Latency: 20 * time.Millisecond})
	keys := make([]string, 60)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i%20)
		if i%3 == 0 {
			keys[i] = ""
		}
	}
	src := newMemSource(txn(1, keys...))
	startSource(t, src, mb, relay.Config{Workers: 3})
	await(t, "ack of 1", func() bool { return src.lastAck() == 1 })
	if peak := mb.Stats().PeakInFlight; peak > 4 {
		t.Errorf("the broker saw %d events in flight at once; it declared 4", peak)
	}
	checkOrder(t, mb.Events(""))
}

// A publish that a stop cut short (DrainTimeout ran out while the broker
// held the call) is given back, no attempt counted, as a store's relay
// releases it: the relay judges a source's results by the same rule.
func TestSourcePublishCutShortByAStopIsNoAttempt(t *testing.T) {
	mb := newMem(t, membroker.Config{})
	nextID = 0
	g := &gate{Broker: mb, hold: 1, entered: make(chan struct{}, 1), open: make(chan struct{})}
	src := newMemSource(txn(1, "k"))
	rec := &recorder{}
	r, err := relay.NewSource(src, g, fast(relay.Config{DrainTimeout: 50 * time.Millisecond, Hooks: []relay.Hook{rec}}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-g.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("event 1 was not published")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after DrainTimeout")
	}
	tot := totals(r)
	if tot.Retried != 0 || tot.Dead != 0 || r.Totals().Released.Load() != 1 {
		t.Errorf("totals %+v, released %d: want the cut-short event released, no attempt counted", tot, r.Totals().Released.Load())
	}
	if a := src.lastAck(); a != 0 {
		t.Errorf("acked %d past an unsettled event", a)
	}
}
