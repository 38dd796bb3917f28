package relay_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store/driver"
)

// badTopicBroker fails every event of topic "bad" with a transient error
// (a full stream, say) that asks for no retry before 10 minutes, and hands the others to a membroker.
type badTopicBroker struct {
	mb    *membroker.Broker
	calls atomic.Int64
}

func (s *badTopicBroker) Close(ctx context.Context) error { return s.mb.Close(ctx) }

func (s *badTopicBroker) Publish(ctx context.Context, events []outbox.Event) []error {
	s.calls.Add(1)
	var good []outbox.Event
	var at []int
	out := make([]error, len(events))
	for i, e := range events {
		if e.Topic == "bad" {
			// transient, and not back within the test: a batch of
			// retried bad events alone would be a broker failure
			out[i] = broker.RetryAfter(errors.New("stream full (transient)"), 10*time.Minute)
			continue
		}
		good = append(good, e)
		at = append(at, i)
	}
	res := s.mb.Publish(ctx, good)
	for k, i := range at {
		out[i] = res[k]
	}
	return out
}

// TestPartialFailureIsNoBrokerOutage: when one topic's events fail and
// another's are confirmed in the same batch, the broker did not fail as a
// whole: the failed events are retried on their own schedule, the relay
// neither backs off nor reports a broker error. (The event-driven
// dispatcher may send the two topics' events in different calls; a call
// that confirmed nothing used to make the whole batch count as a broker
// outage, and the worker backed off for up to 30 s per batch.)
func TestPartialFailureIsNoBrokerOutage(t *testing.T) {
	forEachStore(t, func(t *testing.T, st driver.Store, cfg relay.Config) {
		br := &badTopicBroker{mb: newMem(t, membroker.Config{})}
		cfg.MaxAttempts = 1000
		cfg.BackoffBase = 10 * time.Second // a worker's backoff would show
		cfg.BackoffMax = 10 * time.Second
		cfg.Workers = 1
		cfg.LeaseFor = 10 * time.Second
		r, stop := run(t, st, br, cfg)
		defer stop()
		const n = 8
		for i := 0; i < n; i++ {
			if err := st.Enqueue(context.Background(),
				outbox.Message{Topic: "bad", Key: fmt.Sprintf("b%d", i), Type: "T", Payload: []byte(`{}`)},
				outbox.Message{Topic: "good", Key: fmt.Sprintf("g%d", i), Type: "T", Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, fmt.Sprintf("good event %d", i+1), time.Minute, func() bool {
				if e := r.Health().BrokerError; e != "" {
					t.Fatalf("a batch with confirmed events reported a broker error: %s", e)
				}
				return len(br.mb.Events("good")) > i
			})
		}
		t.Logf("%d good events, one at a time, in %d publish calls", n, br.calls.Load())
	})
}
