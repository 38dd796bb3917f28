package relay_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// partitionBroker is a broker whose ordered unit is a partition, as
// Kafka's idempotent producer is: every event lands on one partition, and
// when "a#1" fails, every later event of the same call fails behind it,
// reported as broker.ErrNotAttempted.
type partitionBroker struct {
	mu        sync.Mutex
	delivered []outbox.Event
	published []outbox.Event // every event handed to Publish, with its Attempts
}

func (p *partitionBroker) Features() broker.Features {
	return broker.Features{Ordering: broker.OrderPartition}
}

func (p *partitionBroker) Publish(_ context.Context, events []outbox.Event) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	res := make([]error, len(events))
	failed := false
	for i, e := range events {
		p.published = append(p.published, e)
		switch {
		case failed:
			res[i] = fmt.Errorf("partition 0 failed ahead of it: %w", broker.ErrNotAttempted)
		case string(e.Payload) == "a#1":
			res[i] = errors.New("NOT_ENOUGH_REPLICAS")
			failed = true
		default:
			p.delivered = append(p.delivered, e)
		}
	}
	return res
}

func (p *partitionBroker) Close(context.Context) error { return nil }

// An event that an ordered-partition broker failed only because an earlier
// event of its partition failed (another key's) was not attempted: it must
// come back with no attempt counted, so it is delivered once the failing
// event is out of its way instead of going DEAD untried beside it.
func TestNotAttemptedEventsCountNoAttempt(t *testing.T) {
	forEachStore(t, func(t *testing.T, st driver.Store, cfg relay.Config) {
		ctx := context.Background()
		pb := &partitionBroker{}
		if err := st.Enqueue(ctx,
			outbox.Message{Topic: "t", Key: "a", Type: "Bumped", Payload: []byte("a#1")},
			outbox.Message{Topic: "t", Key: "b", Type: "Bumped", Payload: []byte("b#1")},
			outbox.Message{Topic: "t", Key: "b", Type: "Bumped", Payload: []byte("b#2")},
		); err != nil {
			t.Fatal(err)
		}
		cfg.MaxAttempts = 2
		cfg.BackoffBase = 300 * time.Millisecond // a#1 waits; b's events get a batch of their own
		cfg.BackoffMax = 300 * time.Millisecond
		run(t, st, pb, cfg)
		waitFor(t, "a#1 to go dead and b's events to be delivered", 30*time.Second, func() bool {
			s := pending(t, st)
			return s.Dead == 1 && s.New+s.Retrying+s.Sending == 0
		})
		dead, err := st.ListDead(ctx, store.DeadQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) != 1 || string(dead[0].Payload) != "a#1" {
			for _, d := range dead {
				t.Errorf("dead: %s attempts=%d %q", d.Payload, d.Attempts, d.LastError)
			}
			t.Fatal("want only a#1 dead")
		}
		pb.mu.Lock()
		defer pb.mu.Unlock()
		var got []string
		for _, e := range pb.delivered {
			got = append(got, string(e.Payload))
		}
		if fmt.Sprint(got) != "[b#1 b#2]" {
			t.Errorf("delivered %v, want [b#1 b#2]", got)
		}
		for _, e := range pb.published {
			if e.Key == "b" && e.Attempts != 0 {
				t.Errorf("%s was published with %d attempts counted; events failed behind another key's failure count none", e.Payload, e.Attempts)
			}
		}
	})
}
