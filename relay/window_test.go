package relay_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store/driver"
)

// A broker that declares MaxInFlight gets no more events at once than that,
// across all workers, and the time a wave waits for room is not taken from
// its publish deadline: with waits longer than PublishTimeout, nothing is
// retried and everything is delivered in key order. With ordering by
// ownership, a batch that waits for its keys' earlier events in other
// batches is charged no attempt either.
func TestInFlightWindowIsSharedAndWaitingIsNoAttempt(t *testing.T) {
	forEachStore(t, func(t *testing.T, st driver.Store, cfg relay.Config) {
		windowWaitIsNoAttempt(t, st, cfg)
	})
}

// windowWaitIsNoAttempt runs 300 events on 30 keys through three workers
// and a window of 20 events, where each publish call takes 200 ms: a wave
// that waits for two others and publishes itself takes 600 ms, more than
// its 500 ms PublishTimeout, so a wait charged to the deadline fails it.
//
// A failed publish is a waiting bug only if its call was given less than
// PublishTimeout: a call that ran its full deadline and still missed it
// (the broker's 200 ms stretched past 500 ms by a starved scheduler, on a
// loaded machine running the whole package under -race) was a real
// attempt, rightly counted; it is logged, not failed. A retry with no
// failed publish behind it fails the test too.
func windowWaitIsNoAttempt(t *testing.T, st driver.Store, cfg relay.Config) {
	mb := newMem(t, membroker.Config{MaxInFlight: 20, Latency: 200 * time.Millisecond})
	msgs := workload(t, st, "t", 300, 30)
	cfg.Workers = 3
	cfg.BatchSize = 50
	cfg.PublishTimeout = 500 * time.Millisecond
	f := &failures{}
	cfg.Hooks = append(cfg.Hooks, f)
	r, _ := run(t, st, mb, cfg)
	waitFor(t, "all delivered", 90*time.Second, func() bool { return pending(t, st).Pending() == 0 })
	checkDelivered(t, msgs, mb.Events("t"))
	if peak := mb.Stats().PeakInFlight; peak > 20 {
		t.Errorf("the broker saw %d events in flight at once; it declared 20", peak)
	}
	retried := r.Totals().Retried.Load()
	f.mu.Lock()
	defer f.mu.Unlock()
	if retried > int64(len(f.failed)) {
		t.Errorf("%d events retried, but only %d publish results failed: an event was charged an attempt it did not get", retried, len(f.failed))
	}
	short := 0
	for _, c := range f.failed {
		// the deadline starts a moment before the call is timed: 50 ms
		// of slack, far less than a wait for one other wave (200 ms)
		if c.took < cfg.PublishTimeout-50*time.Millisecond {
			short++
			if short <= 3 {
				t.Errorf("event %d failed after %v, less than its PublishTimeout of %v: its deadline was spent waiting (%v)", c.id, c.took, cfg.PublishTimeout, c.err)
			}
		}
	}
	if short == 0 && len(f.failed) > 0 {
		t.Logf("%d events failed after their full PublishTimeout (a starved scheduler, not a wait), e.g. event %d after %v: %v",
			len(f.failed), f.failed[0].id, f.failed[0].took, f.failed[0].err)
	}
}

// failures is a hook that keeps every event a publish call failed, but
// for a cancelled call's, with how long that call ran.
type failures struct {
	mu     sync.Mutex
	failed []failedPublish
}

type failedPublish struct {
	id   int64
	took time.Duration
	err  error
}

func (f *failures) OnPublishEnd(_ context.Context, p relay.PublishInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, r := range p.Results {
		// a call cut short by a lost lease or a stop gives its events
		// back, charging no attempt: not a failure here
		if r.Err != nil && !errors.Is(r.Err, context.Canceled) {
			f.failed = append(f.failed, failedPublish{id: p.Events[i].ID, took: p.Took, err: r.Err})
		}
	}
}
