package relay_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

type ctxKey struct{}

// recorder implements every hook and keeps what it was told.
type recorder struct {
	mu sync.Mutex
	seen
}

// seen is what a recorder was told.
type seen struct {
	claims, claimedEvents int
	publishes, confirmed  int
	failed                int
	spanSeen, spanMissing int
	settled               relay.BatchReport
	renewed, lost         int
	health                []string
}

func (r *recorder) OnClaim(_ context.Context, c relay.ClaimInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.claims++
	r.claimedEvents += len(c.Events)
}

func (r *recorder) OnPublishStart(ctx context.Context, _ []outbox.Event) context.Context {
	return context.WithValue(ctx, ctxKey{}, "span")
}

func (r *recorder) OnPublishEnd(ctx context.Context, p relay.PublishInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.publishes++
	if ctx.Value(ctxKey{}) == "span" {
		r.spanSeen++
	} else {
		r.spanMissing++
	}
	for _, res := range p.Results {
		if res.Err == nil {
			r.confirmed++
		} else {
			r.failed++
		}
	}
}

func (r *recorder) OnSettle(_ context.Context, b relay.BatchReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settled.Claimed += b.Claimed
	r.settled.Delivered += b.Delivered
	r.settled.Retried += b.Retried
	r.settled.Dead += b.Dead
}

func (r *recorder) OnLease(_ context.Context, l relay.LeaseInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l.Lost {
		r.lost++
	} else {
		r.renewed++
	}
}

func (r *recorder) OnHealth(_ context.Context, h relay.HealthChange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	state := "recovered"
	if h.Err != nil {
		state = "failing"
	}
	r.health = append(r.health, h.Component+" "+state)
}

func (r *recorder) snapshot() seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.seen
	s.health = append([]string(nil), r.health...)
	return s
}

func TestHooksSeeEveryStepAndHealthTellsTheTruth(t *testing.T) {
	cfg := fastConfig()
	st := teststores.Open(t, "sqlite", store.Options{}).Store
	mb := newMem(t, membroker.Config{})
	mb.SetHook(func(e outbox.Event) error {
		if e.Type == "Poison" {
			return broker.Permanent(errors.New("rejected"))
		}
		return nil
	})
	rec := &recorder{}
	cfg.Hooks = []relay.Hook{rec}
	cfg.LeaseFor = 300 * time.Millisecond
	r, _ := run(t, st, mb, cfg)
	if h := r.Health(); !h.LastDelivered.IsZero() || h.StoreError != "" || h.BrokerError != "" {
		t.Fatalf("health before any work = %+v", h)
	}

	// Ten events, one poison; a publish slower than a third of the lease,
	// so the lease is renewed while it is in flight.
	mb.SetLatency(250 * time.Millisecond)
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
	mb.SetLatency(0)
	s := rec.snapshot()
	if s.claimedEvents != 10 || s.confirmed != 9 || s.failed != 1 || s.settled.Claimed != 10 {
		t.Errorf("hooks saw %+v: want 10 claimed, 9 confirmed, 1 failed", s)
	}
	if s.spanMissing != 0 || s.spanSeen == 0 {
		t.Errorf("OnPublishEnd got the context of OnPublishStart %d times, another %d times", s.spanSeen, s.spanMissing)
	}
	if s.renewed == 0 || s.lost != 0 {
		t.Errorf("lease renewals %d, losses %d: want renewals while the slow publish was in flight, no loss", s.renewed, s.lost)
	}
	h := r.Health()
	if h.LastDelivered.IsZero() || time.Since(h.LastDelivered) > 20*time.Second || h.Delivered != 9 || h.Dead != 1 || h.InFlight != 0 || h.LastClaim.IsZero() {
		t.Errorf("health after delivery = %+v", h)
	}

	// The broker goes away: health says so, with since when, and the
	// health hook hears of it once, and of the recovery once.
	mb.SetDown(true)
	if err := st.Enqueue(context.Background(), outbox.Message{Topic: "t", Key: "late", Type: "Ok", Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the broker reported failing", 10*time.Second, func() bool { return r.Health().BrokerError != "" })
	if h := r.Health(); h.BrokerFailingSince.IsZero() || !strings.Contains(h.BrokerError, "down") {
		t.Errorf("health while the broker is down = %+v", h)
	}
	time.Sleep(300 * time.Millisecond) // several failed rounds: still one transition
	mb.SetDown(false)
	waitFor(t, "the broker recovered", 10*time.Second, func() bool { return r.Health().BrokerError == "" && r.Health().Delivered == 10 })
	if got := rec.snapshot().health; strings.Join(got, ",") != "broker failing,broker recovered" {
		t.Errorf("health transitions = %v, want one failing and one recovered", got)
	}
}

func TestAValueThatIsNoHookIsRefused(t *testing.T) {
	st := teststores.Open(t, "sqlite", store.Options{}).Store
	_, err := relay.New(st, newMem(t, membroker.Config{}), relay.Config{Hooks: []relay.Hook{"not a hook"}})
	if err == nil || !strings.Contains(err.Error(), "Hooks[0]") {
		t.Fatalf("err = %v, want Hooks[0] refused", err)
	}
}
