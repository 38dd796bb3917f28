package brokertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// The checks gated by what an adapter declares (broker.Describer,
// broker.ResultPublisher): one suite serves brokers with different
// promises, and an adapter is held to exactly what it claims.

// featureChecks are run by Run next to the basic ones.
func (s suite) featureChecks() []struct {
	name string
	fn   func(*testing.T)
} {
	return []struct {
		name string
		fn   func(*testing.T)
	}{
		{"MixedTopics", s.mixedTopics},
		{"OrderAfterFailure", s.orderAfterFailure},
		{"ClosedIsUnavailable", s.closedIsUnavailable},
		{"ContextEndClassified", s.contextEndClassified},
		{"ResultMetadata", s.resultMetadata},
		{"DeclaredLimits", s.declaredLimits},
	}
}

// mixedTopics: one batch for two topics, interleaved, arrives at each in
// its own order.
func (s suite) mixedTopics(t *testing.T) {
	if s.h.AddTopic == nil {
		t.Skip("Harness.AddTopic not set")
	}
	b, r1, topic1 := s.open(t)
	topic2 := uniqueTopic(t)
	r2 := s.h.AddTopic(t, b, topic2)
	var events, want1, want2 []outbox.Event
	for i := range 20 {
		e := newEvent(topic1, i)
		if i%2 == 1 {
			e.Topic = topic2
		}
		e.Key = fmt.Sprintf("key-%d", i%3)
		events = append(events, e)
		if e.Topic == topic1 {
			want1 = append(want1, e)
		} else {
			want2 = append(want2, e)
		}
	}
	s.publishOK(t, b, events)
	for _, c := range []struct {
		r    Receiver
		want []outbox.Event
	}{{r1, want1}, {r2, want2}} {
		got := s.receiveLike(t, c.r, c.want)
		for i, m := range got {
			if d := same(c.want[i], m); d != "" {
				t.Errorf("%s: topic %s, message %d: %s", s.h.Name, c.want[i].Topic, i, d)
			}
		}
		s.expectNothing(t, c.r)
	}
}

// orderAfterFailure: a key's event fails (too large) amid others. Every
// adapter must confirm the other keys' events; one that declares OrderKey
// or OrderPartition must not confirm the later events of the failed key.
func (s suite) orderAfterFailure(t *testing.T) {
	if s.h.MaxPayload <= 0 {
		t.Skip("Harness.MaxPayload not set: no way to make one event fail")
	}
	ordering := broker.OrderNone
	b, r, topic := s.open(t)
	ordering = broker.FeaturesOf(b).Ordering
	events := []outbox.Event{newEvent(topic, 0), newEvent(topic, 1), newEvent(topic, 2), newEvent(topic, 3)}
	events[0].Key, events[1].Key, events[2].Key, events[3].Key = "k", "k", "k", "other"
	events[1].Payload = bytes.Repeat([]byte{'x'}, s.h.MaxPayload+1)
	res := b.Publish(ctxFor(t, 30*time.Second), events)
	if len(res) != len(events) {
		t.Fatalf("%s: Publish returned %d results for %d events", s.h.Name, len(res), len(events))
	}
	if res[0] != nil || res[3] != nil {
		t.Errorf("%s: events before the failure, or of another key, failed: %v, %v", s.h.Name, res[0], res[3])
	}
	if res[1] == nil || !broker.IsPermanent(res[1]) {
		t.Errorf("%s: the oversize event: %v, want a permanent error", s.h.Name, res[1])
	}
	if ordering >= broker.OrderKey {
		if res[2] == nil {
			t.Fatalf("%s: declares %s ordering, yet confirmed k's third event after its second failed", s.h.Name, ordering)
		}
		if broker.IsPermanent(res[2]) {
			t.Errorf("%s: the event held back behind a failure got a permanent error (the relay would bury it untried): %v", s.h.Name, res[2])
		}
		got := s.receiveLike(t, r, []outbox.Event{events[0], events[3]})
		for i, want := range []outbox.Event{events[0], events[3]} {
			if got[i].EventID != want.EventID {
				t.Errorf("%s: message %d is %s, want %s", s.h.Name, i, got[i].EventID, want.EventID)
			}
		}
		s.expectNothing(t, r)
	}
}

// closedIsUnavailable: after Close every result says the broker cannot be
// reached (broker.ErrUnavailable), so a relay that is shutting down gives
// its events back without counting an attempt.
func (s suite) closedIsUnavailable(t *testing.T) {
	b, _, topic := s.open(t)
	if err := b.Close(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("%s: Close: %v", s.h.Name, err)
	}
	for i, err := range b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{newEvent(topic, 0), newEvent(topic, 1)}) {
		if !errors.Is(err, broker.ErrUnavailable) {
			t.Errorf("%s: Publish after Close: result %d = %v, want one wrapping broker.ErrUnavailable", s.h.Name, i, err)
		}
	}
}

// contextEndClassified: when ctx ends, each result says so (it wraps the
// context's error) or says the broker is unavailable: never an error the
// relay cannot tell from a broker's refusal.
func (s suite) contextEndClassified(t *testing.T) {
	b, _, topic := s.open(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i, err := range b.Publish(ctx, []outbox.Event{newEvent(topic, 0), newEvent(topic, 1)}) {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, broker.ErrUnavailable) {
			t.Errorf("%s: cancelled context: result %d = %v, want one wrapping context.Canceled or broker.ErrUnavailable", s.h.Name, i, err)
		}
	}
	dctx, dcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer dcancel()
	for i, err := range b.Publish(dctx, []outbox.Event{newEvent(topic, 2)}) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, broker.ErrUnavailable) {
			t.Errorf("%s: passed deadline: result %d = %v, want one wrapping context.DeadlineExceeded or broker.ErrUnavailable", s.h.Name, i, err)
		}
	}
}

// resultMetadata: an adapter that reports results says where each event
// went, distinctly, and a republished event is either recognised as a
// duplicate or stored again (at least once), never an error.
func (s suite) resultMetadata(t *testing.T) {
	b, _, topic := s.open(t)
	if _, ok := b.(broker.ResultPublisher); !ok {
		t.Skip("the adapter is not a broker.ResultPublisher")
	}
	events := []outbox.Event{newEvent(topic, 0), newEvent(topic, 1), newEvent(topic, 2)}
	res := broker.PublishResults(ctxFor(t, 30*time.Second), b, events)
	if len(res) != len(events) {
		t.Fatalf("%s: PublishResults returned %d results for %d events", s.h.Name, len(res), len(events))
	}
	where := map[string]bool{}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("%s: result %d: %v", s.h.Name, i, r.Err)
		}
		if r.Sequence == 0 && r.Offset < 0 && r.ID == "" {
			t.Errorf("%s: result %d carries neither a sequence, an offset nor an id: %+v", s.h.Name, i, r)
		}
		w := fmt.Sprintf("%s/%d/%d/%d/%s", r.Stream, r.Sequence, r.Partition, r.Offset, r.ID)
		if where[w] {
			t.Errorf("%s: two events were reported stored at %s", s.h.Name, w)
		}
		where[w] = true
	}
	again := broker.PublishResults(ctxFor(t, 30*time.Second), b, events[:1])
	if len(again) != 1 || again[0].Err != nil {
		t.Fatalf("%s: republishing an event: %+v", s.h.Name, again)
	}
}

// declaredLimits: what the adapter declares agrees with what the harness
// knows of the server.
func (s suite) declaredLimits(t *testing.T) {
	b, _, _ := s.open(t)
	f := broker.FeaturesOf(b)
	if f.MaxMessage < 0 || f.MaxInFlight < 0 {
		t.Errorf("%s: negative limits declared: %+v", s.h.Name, f)
	}
	if f.MaxMessage > 0 && s.h.MaxPayload > f.MaxMessage {
		t.Errorf("%s: declares messages of at most %d bytes, but the harness says payloads of %d are accepted", s.h.Name, f.MaxMessage, s.h.MaxPayload)
	}
}
