package relay_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/source/pollsource"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// A relay over a source.Source (here the poller as one) tells its hooks,
// Health and Totals what a store's relay tells them.
func TestNewSourceHooksAndHealth(t *testing.T) {
	st := teststores.Open(t, "sqlite", store.Options{}).Store
	mb := newMem(t, membroker.Config{})
	mb.SetHook(func(e outbox.Event) error {
		if e.Type == "Poison" {
			return broker.Permanent(errors.New("rejected"))
		}
		return nil
	})
	src, err := pollsource.New(st, pollsource.Config{LeaseFor: 2 * time.Second, PollInterval: 20 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
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
	var msgs []outbox.Message
	for i := range 10 {
		typ := "Ok"
		if i == 3 {
			typ = "Poison"
		}
		msgs = append(msgs, outbox.Message{Topic: "t", Key: "k" + string(rune('a'+i)), Type: typ, Payload: []byte("{}")})
	}
	if err := st.Enqueue(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
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
	waitFor(t, "the table empty but for the DEAD event", 10*time.Second, func() bool {
		p := pending(t, st)
		return p.Pending() == 0 && p.Dead == 1
	})

	mb.SetDown(true)
	if err := st.Enqueue(context.Background(), outbox.Message{Topic: "t", Key: "late", Type: "Ok", Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
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
	st := teststores.Open(t, "sqlite", store.Options{}).Store
	src, err := pollsource.New(st, pollsource.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, err := relay.NewSource(src, newMem(t, membroker.Config{}), relay.Config{MaxAttempts: -1}); err == nil || !strings.Contains(err.Error(), "MaxAttempts") {
		t.Fatalf("NewSource with MaxAttempts -1: %v", err)
	}
}
