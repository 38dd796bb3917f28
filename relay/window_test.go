package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/internal/teststores"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
)

// A broker that declares MaxInFlight gets no more events at once than that,
// across all workers, and the time a wave waits for room is not taken from
// its publish deadline: with waits longer than PublishTimeout, nothing is
// retried and everything is delivered in key order.
func TestInFlightWindowIsSharedAndWaitingIsNoAttempt(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		mb := newMem(t, membroker.Config{MaxInFlight: 20, Latency: 100 * time.Millisecond})
		msgs := workload(t, st, "t", 300, 30)
		cfg := fastConfig()
		cfg.Workers = 3
		cfg.BatchSize = 50
		cfg.PublishTimeout = 250 * time.Millisecond // less than a wave waits for two others and publishes itself (300 ms), with room for a loaded machine
		r, _ := run(t, st, mb, cfg)
		waitFor(t, "all delivered", 60*time.Second, func() bool { return pending(t, st).Pending() == 0 })
		checkDelivered(t, msgs, mb.Events("t"))
		if peak := mb.Stats().PeakInFlight; peak > 20 {
			t.Errorf("the broker saw %d events in flight at once; it declared 20", peak)
		}
		if n := r.Totals().Retried.Load(); n != 0 {
			t.Errorf("%d events retried: waiting for the window was counted as a failed publish", n)
		}
	})
}

// failures is a hook that keeps the errors of the events a publish call
// did not confirm, so that a test can say what was counted as an attempt.
type failures struct {
	mu   sync.Mutex
	errs []string
}

func (f *failures) OnPublishEnd(_ context.Context, p relay.PublishInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, r := range p.Results {
		if r.Err != nil && len(f.errs) < 5 {
			f.errs = append(f.errs, fmt.Sprintf("event %d after %v: %v", p.Events[i].ID, p.Took, r.Err))
		}
	}
}

// The same with ownership: a batch that waits for window room, or for
// the earlier events of its keys in other batches, is charged no attempt.
func TestInFlightWindowIsSharedAndWaitingIsNoAttemptOwned(t *testing.T) {
	forOwnedStores(t, func(t *testing.T, o teststores.Opened) {
		st := o.Store
		mb := newMem(t, membroker.Config{MaxInFlight: 20, Latency: 100 * time.Millisecond})
		msgs := workload(t, st, "t", 300, 30)
		cfg := ownedConfig()
		cfg.Workers = 3
		cfg.BatchSize = 50
		cfg.PublishTimeout = 250 * time.Millisecond
		f := &failures{}
		cfg.Hooks = []relay.Hook{f}
		r, _ := run(t, st, mb, cfg)
		waitFor(t, "all delivered", 60*time.Second, func() bool { return pending(t, st).Pending() == 0 })
		checkDelivered(t, msgs, mb.Events("t"))
		if peak := mb.Stats().PeakInFlight; peak > 20 {
			t.Errorf("the broker saw %d events in flight at once; it declared 20", peak)
		}
		if n := r.Totals().Retried.Load(); n != 0 {
			f.mu.Lock()
			t.Errorf("%d events retried: waiting was counted as a failed publish; first failures: %q", n, f.errs)
			f.mu.Unlock()
		}
	})
}
