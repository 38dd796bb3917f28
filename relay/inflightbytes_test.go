package relay_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store/driver"
)

// heldBroker is a membroker whose calls take a few milliseconds (so that
// claimed events pile up against the budget) and that records, at each
// call, the most payload bytes the relay said it held.
type heldBroker struct {
	mb   *membroker.Broker
	r    atomic.Pointer[relay.Relay]
	most atomic.Int64
}

func (b *heldBroker) Close(ctx context.Context) error { return b.mb.Close(ctx) }

func (b *heldBroker) Publish(ctx context.Context, events []outbox.Event) []error {
	b.sample()
	select {
	case <-time.After(3 * time.Millisecond):
	case <-ctx.Done():
	}
	return b.mb.Publish(ctx, events)
}

func (b *heldBroker) sample() {
	if r := b.r.Load(); r != nil {
		n := r.Health().InflightBytes
		for m := b.most.Load(); n > m && !b.most.CompareAndSwap(m, n); m = b.most.Load() {
		}
	}
}

// claimSizes is a HookClaim that records each claim's events and payload
// bytes.
type claimSizes struct {
	mu     sync.Mutex
	counts []int
	bytes  []int64
}

func (c *claimSizes) OnClaim(_ context.Context, ci relay.ClaimInfo) {
	if len(ci.Events) == 0 {
		return
	}
	var n int64
	for _, e := range ci.Events {
		n += int64(len(e.Payload))
	}
	c.mu.Lock()
	c.counts = append(c.counts, len(ci.Events))
	c.bytes = append(c.bytes, n)
	c.mu.Unlock()
}

// With events of 64 KiB and MaxInflightBytes 256 KiB, the relay never
// holds more than the budget plus one event, its claims take at most four
// events (one when less than an event's bytes is left), every event is
// delivered and each key's in order.
func TestMaxInflightBytesBoundsWhatTheRelayHolds(t *testing.T) {
	forEachStore(t, func(t *testing.T, st driver.Store, cfg relay.Config) {
		const event, budget = 64 << 10, 256 << 10
		var msgs []outbox.Message
		seq := map[string]int{}
		for i := range 80 {
			key := fmt.Sprintf("k%d", i%5)
			if i%7 == 0 {
				key = ""
			}
			seq[key]++
			p := fmt.Appendf(nil, "%s#%d|", key, seq[key])
			msgs = append(msgs, outbox.Message{Topic: "orders", Key: key, Type: "Bumped", Payload: append(p, strings.Repeat("x", event-len(p))...)})
		}
		for i := 0; i < len(msgs); i += 20 {
			if err := st.Enqueue(context.Background(), msgs[i:i+20]...); err != nil {
				t.Fatal(err)
			}
		}
		b := &heldBroker{mb: newMem(t, membroker.Config{})}
		sizes := &claimSizes{}
		cfg.MaxInflightBytes = budget
		cfg.Workers = 3
		cfg.Hooks = []relay.Hook{sizes}
		r, err := relay.New(st, b, cfg)
		if err != nil {
			t.Fatal(err)
		}
		b.r.Store(r)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		stopSampling := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				select {
				case <-stopSampling:
					return
				case <-time.After(200 * time.Microsecond):
					b.sample()
				}
			}
		}()
		waitFor(t, "every event delivered", 60*time.Second, func() bool { return len(b.mb.Events("orders")) >= len(msgs) })
		close(stopSampling)
		<-sampled
		checkDelivered(t, msgs, b.mb.Events("orders"))
		if most := b.most.Load(); most > budget+event {
			t.Errorf("the relay held %d payload bytes at most; want at most %d (the budget plus one event)", most, budget+event)
		} else if most < budget/2 {
			t.Errorf("the relay held %d payload bytes at most; with a slow broker it should reach near the budget %d", most, budget)
		}
		sizes.mu.Lock()
		defer sizes.mu.Unlock()
		for i, n := range sizes.counts {
			if n > budget/event {
				t.Errorf("claim %d took %d events (%d bytes); a budget of %d holds at most %d", i, n, sizes.bytes[i], budget, budget/event)
			}
		}
		waitFor(t, "the bytes held to go back to 0", 10*time.Second, func() bool { return r.Health().InflightBytes == 0 })
	})
}
