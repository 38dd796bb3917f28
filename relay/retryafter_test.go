package relay_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// A broker that answers "retry after 1.5s" (an HTTP 429 with Retry-After)
// is not tried again sooner, although the relay's own backoff is 50ms at
// most; a plain transient error still retries at the relay's pace.
func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	st := teststores.Open(t, "sqlite", store.Options{}).Store
	mb := newMem(t, membroker.Config{})
	const after = 1500 * time.Millisecond
	var mu sync.Mutex
	tries := map[string][]time.Time{}
	mb.SetHook(func(e outbox.Event) error {
		mu.Lock()
		defer mu.Unlock()
		tries[e.Key] = append(tries[e.Key], time.Now())
		if len(tries[e.Key]) > 1 {
			return nil
		}
		if e.Key == "throttled" {
			return broker.RetryAfter(errors.New("429 Too Many Requests"), after)
		}
		return errors.New("503 Service Unavailable")
	})
	if err := st.Enqueue(context.Background(),
		outbox.Message{Topic: "t", Key: "throttled", Type: "T"},
		outbox.Message{Topic: "t", Key: "plain", Type: "T"}); err != nil {
		t.Fatal(err)
	}
	run(t, st, mb, fastConfig())
	waitFor(t, "both events to be delivered", 30*time.Second, func() bool { return len(mb.Events("t")) == 2 })
	mu.Lock()
	defer mu.Unlock()
	if gap := tries["throttled"][1].Sub(tries["throttled"][0]); gap < after {
		t.Errorf("the throttled event was tried again after %v; the broker asked for %v", gap, after)
	}
	if gap := tries["plain"][1].Sub(tries["plain"][0]); gap >= after {
		t.Errorf("the plain transient failure waited %v; the relay's backoff is 50ms at most", gap)
	}
}

func TestRetryAfterOf(t *testing.T) {
	t.Parallel()
	base := errors.New("throttled")
	if broker.RetryAfter(nil, time.Second) != nil || broker.RetryAfter(base, 0) != base {
		t.Error("RetryAfter of nil or with no delay must return its error unchanged")
	}
	err := broker.Permanent(broker.RetryAfter(base, 3*time.Second))
	if broker.RetryAfterOf(err) != 3*time.Second || !errors.Is(err, base) || broker.RetryAfterOf(base) != 0 {
		t.Errorf("RetryAfterOf(%v) = %v", err, broker.RetryAfterOf(err))
	}
}
