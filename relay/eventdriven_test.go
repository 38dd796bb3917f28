package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// slowKeyBroker is a membroker whose calls that carry an event of key
// "slow" take a second. It offers only Publish and Close (no
// PublishResults, no Features: a broker that keeps no order).
type slowKeyBroker struct{ mb *membroker.Broker }

func (s slowKeyBroker) Close(ctx context.Context) error { return s.mb.Close(ctx) }

func (s slowKeyBroker) Publish(ctx context.Context, events []outbox.Event) []error {
	for _, e := range events {
		if e.Key == "slow" {
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
			break
		}
	}
	return s.mb.Publish(ctx, events)
}

// On a broker that keeps no order after a failure, a key's next event
// goes as soon as its previous one is confirmed, not when the other keys'
// events of the same call or round are: a slow key holds only itself. The
// fast key's 15 events are all delivered while the slow key's first call
// (a second) is still in flight; round by round, the fast key moved one
// event per slow call.
func TestOwnedSlowKeyHoldsOnlyItself(t *testing.T) {
	forEachOpened(t, func(t *testing.T, o teststores.Opened) {
		st := o.Store
		mb := newMem(t, membroker.Config{})
		var msgs []outbox.Message
		for i := 1; i <= 15; i++ {
			if i <= 3 {
				msgs = append(msgs, outbox.Message{Topic: "t", Key: "slow", Type: "T", Payload: fmt.Appendf(nil, "slow#%d", i)})
			}
			msgs = append(msgs, outbox.Message{Topic: "t", Key: "fast", Type: "T", Payload: fmt.Appendf(nil, "fast#%d", i)})
		}
		if err := st.Enqueue(context.Background(), msgs...); err != nil {
			t.Fatal(err)
		}
		cfg := fastConfig()
		cfg.PublishTimeout = 30 * time.Second
		run(t, st, slowKeyBroker{mb}, cfg)
		waitFor(t, "delivery", 60*time.Second, func() bool { return pending(t, st).Pending() == 0 })
		got := mb.Events("t")
		checkDelivered(t, msgs, got)
		slow := 0
		for _, e := range got {
			switch e.Key {
			case "slow":
				slow++
			case "fast":
				if string(e.Payload) == "fast#15" && slow > 1 {
					t.Errorf("%d events of the slow key were delivered before the fast key's last one: the fast key waited for the slow one's calls", slow)
				}
			}
		}
	})
}
