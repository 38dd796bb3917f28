package membroker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/brokertest"
	"github.com/outbox-go/outbox/broker/membroker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newBroker(t *testing.T, cfg membroker.Config) *membroker.Broker {
	t.Helper()
	b, err := membroker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// receiver reads one topic of a membroker in delivery order.
type receiver struct {
	b     *membroker.Broker
	topic string
	next  int
}

func (r *receiver) Next(ctx context.Context) (brokertest.Received, error) {
	events, err := r.b.Wait(ctx, r.topic, r.next+1)
	if err != nil {
		return brokertest.Received{}, err
	}
	e := events[r.next]
	r.next++
	return brokertest.Received{EventID: e.EventID, Type: e.Type, Key: e.Key, Topic: e.Topic, Payload: e.Payload, Headers: e.Headers}, nil
}

func TestConformance(t *testing.T) {
	brokertest.Run(t, brokertest.Harness{
		Name: "membroker",
		New: func(t *testing.T, topic string) (broker.Broker, brokertest.Receiver) {
			b := newBroker(t, membroker.Config{})
			return b, &receiver{b: b, topic: topic}
		},
		MaxPayload: outbox.DefaultMaxPayload,
		AddTopic: func(_ *testing.T, b broker.Broker, topic string) brokertest.Receiver {
			return &receiver{b: b.(*membroker.Broker), topic: topic}
		},
	})
}

// The suite holds a key-ordered broker to the promise it declares.
func TestConformanceKeyOrdered(t *testing.T) {
	brokertest.Run(t, brokertest.Harness{
		Name: "membroker (key-ordered)",
		New: func(t *testing.T, topic string) (broker.Broker, brokertest.Receiver) {
			b := newBroker(t, membroker.Config{KeyOrdered: true})
			return b, &receiver{b: b, topic: topic}
		},
		MaxPayload: outbox.DefaultMaxPayload,
	})
}

func events(n int, key string) []outbox.Event {
	out := make([]outbox.Event, n)
	for i := range out {
		out[i] = outbox.Event{ID: int64(i + 1), Message: outbox.Message{EventID: outbox.NewEventID(), Topic: "t", Key: key, Type: "T", Payload: []byte{byte(i)}}}
	}
	return out
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []membroker.Config{{MaxPayload: -1}, {Latency: -time.Second}} {
		if _, err := membroker.New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

func TestDown(t *testing.T) {
	t.Parallel()
	b := newBroker(t, membroker.Config{})
	b.SetDown(true)
	for i, err := range b.Publish(ctx(t), events(3, "k")) {
		if !errors.Is(err, membroker.ErrDown) || broker.IsPermanent(err) {
			t.Errorf("result %d while down = %v, want transient ErrDown", i, err)
		}
	}
	if n := len(b.Events("")); n != 0 {
		t.Errorf("%d events recorded while down", n)
	}
	b.SetDown(false)
	for i, err := range b.Publish(ctx(t), events(3, "k")) {
		if err != nil {
			t.Errorf("result %d after recovery = %v", i, err)
		}
	}
	if got := b.Stats(); got != (membroker.Stats{Calls: 2, Confirmed: 3, Failed: 3, PeakInFlight: 3}) {
		t.Errorf("Stats = %+v", got)
	}
}

func TestFailNextSpansCalls(t *testing.T) {
	t.Parallel()
	b := newBroker(t, membroker.Config{})
	boom := errors.New("boom")
	b.FailNext(3, boom)
	res := b.Publish(ctx(t), events(2, ""))
	res = append(res, b.Publish(ctx(t), events(2, ""))...)
	want := []error{boom, boom, boom, nil}
	for i := range want {
		if !errors.Is(res[i], want[i]) || (want[i] == nil && res[i] != nil) {
			t.Errorf("result %d = %v, want %v", i, res[i], want[i])
		}
	}
	b.FailNext(1, nil)
	if res := b.Publish(ctx(t), events(1, "")); !errors.Is(res[0], membroker.ErrInjected) {
		t.Errorf("FailNext(1, nil) result = %v, want ErrInjected", res[0])
	}
}

func TestHookPoisonEvent(t *testing.T) {
	t.Parallel()
	b := newBroker(t, membroker.Config{})
	evs := events(3, "")
	poison := evs[1].EventID
	b.SetHook(func(e outbox.Event) error {
		if e.EventID == poison {
			return broker.Permanentf("rejected %s", e.EventID)
		}
		return nil
	})
	res := b.Publish(ctx(t), evs)
	if res[0] != nil || res[2] != nil || !broker.IsPermanent(res[1]) {
		t.Errorf("results = %v; want nil, permanent, nil", res)
	}
	got := b.Events("t")
	if len(got) != 2 || got[0].EventID != evs[0].EventID || got[1].EventID != evs[2].EventID {
		t.Errorf("delivered %v", got)
	}
	b.SetHook(nil)
	if res := b.Publish(ctx(t), evs[1:2]); res[0] != nil {
		t.Errorf("after removing the hook: %v", res[0])
	}
}

func TestKeyOrderedHoldsLaterEventsOfFailedKey(t *testing.T) {
	t.Parallel()
	b := newBroker(t, membroker.Config{KeyOrdered: true})
	if b.Features().Ordering != broker.OrderKey {
		t.Fatal("Features().Ordering is not OrderKey with Config.KeyOrdered")
	}
	evs := append(events(2, "a"), events(2, "b")...)
	evs = append(evs, events(1, "a")...)
	b.FailNext(1, nil) // fails evs[0], key a
	res := b.Publish(ctx(t), evs)
	if !errors.Is(res[0], membroker.ErrInjected) || !errors.Is(res[1], membroker.ErrHeld) ||
		res[2] != nil || res[3] != nil || !errors.Is(res[4], membroker.ErrHeld) {
		t.Errorf("results = %v", res)
	}
	if bk := newBroker(t, membroker.Config{}); bk.Features().Ordering != broker.OrderNone {
		t.Error("Features().Ordering is not OrderNone without Config.KeyOrdered")
	}
}

func TestDedup(t *testing.T) {
	t.Parallel()
	evs := events(2, "")
	for _, dedup := range []bool{false, true} {
		b := newBroker(t, membroker.Config{Dedup: dedup})
		b.Publish(ctx(t), evs)
		for i, err := range b.Publish(ctx(t), evs) {
			if err != nil {
				t.Errorf("dedup=%v: duplicate %d: %v", dedup, i, err)
			}
		}
		want := 4
		if dedup {
			want = 2
		}
		if n := len(b.Events("")); n != want {
			t.Errorf("dedup=%v: %d events recorded, want %d", dedup, n, want)
		}
	}
}

func TestLatencyHonoursContext(t *testing.T) {
	t.Parallel()
	b := newBroker(t, membroker.Config{Latency: time.Hour})
	c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	res := b.Publish(c, events(2, ""))
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Publish took %v", d)
	}
	for i, err := range res {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("result %d = %v, want DeadlineExceeded", i, err)
		}
	}
	b.SetLatency(0)
	if res := b.Publish(ctx(t), events(1, "")); res[0] != nil {
		t.Errorf("after SetLatency(0): %v", res[0])
	}
}

func TestEventsAreCopies(t *testing.T) {
	t.Parallel()
	b := newBroker(t, membroker.Config{})
	evs := events(1, "")
	evs[0].Headers = map[string]string{"h": "v"}
	b.Publish(ctx(t), evs)
	evs[0].Payload[0] = 99 // the caller reuses its buffer
	got := b.Events("t")
	got[0].Headers["h"] = "changed"
	got[0].Payload[0] = 42
	again := b.Events("t")
	if again[0].Payload[0] != 0 || again[0].Headers["h"] != "v" {
		t.Errorf("recorded event changed through a copy: %+v", again[0])
	}
}

func TestWaitAndChanged(t *testing.T) {
	t.Parallel()
	b := newBroker(t, membroker.Config{})
	changed := b.Changed()
	done := make(chan []outbox.Event)
	go func() {
		got, _ := b.Wait(ctx(t), "t", 3)
		done <- got
	}()
	b.Publish(ctx(t), events(2, ""))
	<-changed
	b.Publish(ctx(t), events(1, ""))
	if got := <-done; len(got) != 3 {
		t.Errorf("Wait returned %d events", len(got))
	}

	short, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if got, err := b.Wait(short, "other", 1); !errors.Is(err, context.DeadlineExceeded) || len(got) != 0 {
		t.Errorf("Wait on an empty topic = %v, %v", got, err)
	}
	b.Reset()
	if n := len(b.Events("")); n != 0 || b.Stats() != (membroker.Stats{}) {
		t.Errorf("after Reset: %d events, %+v", n, b.Stats())
	}
}
