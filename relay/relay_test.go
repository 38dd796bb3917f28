package relay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/testkit/teststores"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// failureLog is a logger that keeps the relay's warnings and errors and
// writes them to t's log at its end if t failed: what the relay saw on
// the way to a failed wait.
func failureLog(t *testing.T) *slog.Logger {
	var mu sync.Mutex
	var buf bytes.Buffer
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if t.Failed() && buf.Len() > 0 {
			t.Logf("the relay's warnings:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if buf.Len() < 64<<10 {
			buf.Write(p)
		}
		return len(p), nil
	}), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// fastConfig keeps retries and polls short so tests finish quickly.
func fastConfig() relay.Config {
	return relay.Config{
		BatchSize:    100,
		LeaseFor:     2 * time.Second,
		PollInterval: 20 * time.Millisecond,
		BackoffBase:  5 * time.Millisecond,
		BackoffMax:   50 * time.Millisecond,
		DrainTimeout: time.Second,
		Logger:       quiet,
	}
}

// forEachStore runs fn once per store kind on a fresh table, with
// fastConfig.
func forEachStore(t *testing.T, fn func(t *testing.T, st driver.Store, cfg relay.Config)) {
	for _, kind := range teststores.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			fn(t, teststores.Open(t, kind, store.Options{}).Store, fastConfig())
		})
	}
}

func newMem(t *testing.T, cfg membroker.Config) *membroker.Broker {
	t.Helper()
	b, err := membroker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// run starts a relay and returns a stop function that waits for Run.
func run(t *testing.T, st driver.Store, b broker.Broker, cfg relay.Config) (*relay.Relay, func()) {
	t.Helper()
	r, err := relay.New(st, b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("Run did not return within 15s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return r, stop
}

// workload enqueues n events over keys (key "" every 7th), each payload
// naming its key and sequence.
func workload(t *testing.T, st driver.Store, topic string, n, keys int) []outbox.Message {
	t.Helper()
	msgs := make([]outbox.Message, n)
	seq := map[string]int{}
	for i := range msgs {
		key := fmt.Sprintf("k%d", i%keys)
		if i%7 == 0 {
			key = ""
		}
		seq[key]++
		msgs[i] = outbox.Message{Topic: topic, Key: key, Type: "Bumped", Payload: fmt.Appendf(nil, "%s#%d", key, seq[key])}
	}
	for i := 0; i < n; i += 250 {
		if err := st.Enqueue(context.Background(), msgs[i:min(i+250, n)]...); err != nil {
			t.Fatal(err)
		}
	}
	return msgs
}

// checkDelivered asserts every message was delivered, and that first
// deliveries of each key come in enqueue order. It returns the duplicates.
func checkDelivered(t *testing.T, msgs []outbox.Message, got []outbox.Event) int {
	t.Helper()
	first := map[string]bool{}
	var order = map[string][]string{}
	dups := 0
	for _, e := range got {
		if first[e.EventID] {
			dups++
			continue
		}
		first[e.EventID] = true
		if e.Key != "" {
			order[e.Key] = append(order[e.Key], string(e.Payload))
		}
	}
	want := map[string][]string{}
	for _, m := range msgs {
		if m.Key != "" {
			want[m.Key] = append(want[m.Key], string(m.Payload))
		}
	}
	if len(first) != len(msgs) {
		t.Errorf("delivered %d distinct events, want %d (lost %d)", len(first), len(msgs), len(msgs)-len(first))
	}
	for k, w := range want {
		g := order[k]
		if fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("key %s: first deliveries out of order:\n got %v\nwant %v", k, g, w)
			return dups
		}
	}
	return dups
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func pending(t *testing.T, st driver.Store) store.Stats {
	t.Helper()
	s, err := st.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDeliversEverythingInKeyOrderWithTwoRelays(t *testing.T) {
	forEachStore(t, func(t *testing.T, st driver.Store, cfg relay.Config) {
		mb := newMem(t, membroker.Config{})
		msgs := workload(t, st, "orders", 1500, 40)
		run(t, st, mb, cfg)
		run(t, st, mb, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		got, err := mb.Wait(ctx, "orders", len(msgs))
		if err != nil {
			t.Fatalf("waiting for deliveries: %v (got %d of %d)", err, len(got), len(msgs))
		}
		waitFor(t, "an empty outbox", 10*time.Second, func() bool { return pending(t, st).Pending() == 0 })
		checkDelivered(t, msgs, mb.Events("orders"))
	})
}

func TestTransientFailuresAreRetriedInOrder(t *testing.T) {
	forEachStore(t, func(t *testing.T, st driver.Store, cfg relay.Config) {
		mb := newMem(t, membroker.Config{})
		mb.FailNext(60, errors.New("connection reset"))
		msgs := workload(t, st, "orders", 400, 10)
		r, _ := run(t, st, mb, cfg)
		waitFor(t, "all delivered", 60*time.Second, func() bool { return pending(t, st).Pending() == 0 })
		checkDelivered(t, msgs, mb.Events("orders"))
		if r.Totals().Retried.Load() == 0 {
			t.Error("no retries counted though 60 publishes failed")
		}
	})
}

func TestPoisonEventGoesDeadAndHoldsOnlyItsKey(t *testing.T) {
	forEachStore(t, func(t *testing.T, st driver.Store, cfg relay.Config) {
		ctx := context.Background()
		mb := newMem(t, membroker.Config{})
		poisoned := true
		var mu sync.Mutex
		mb.SetHook(func(e outbox.Event) error {
			mu.Lock()
			defer mu.Unlock()
			if poisoned && e.Type == "Poison" {
				return broker.Permanent(errors.New("rejected: schema mismatch"))
			}
			return nil
		})
		msgs := []outbox.Message{
			{Topic: "t", Key: "bad", Type: "Ok", Payload: []byte("bad#1")},
			{Topic: "t", Key: "bad", Type: "Poison", Payload: []byte("bad#2")},
			{Topic: "t", Key: "bad", Type: "Ok", Payload: []byte("bad#3")},
		}
		for i := 0; i < 30; i++ {
			msgs = append(msgs, outbox.Message{Topic: "t", Key: fmt.Sprintf("good%d", i%3), Type: "Ok", Payload: fmt.Appendf(nil, "good#%d", i)})
		}
		if err := st.Enqueue(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
		_, stop := run(t, st, mb, cfg)
		waitFor(t, "the good keys and the poison's predecessor", 30*time.Second, func() bool { return len(mb.Events("t")) == 31 })
		waitFor(t, "one dead event and bad#3 released", 10*time.Second, func() bool {
			s := pending(t, st)
			return s.Dead == 1 && s.Sending == 0
		})
		s := pending(t, st)
		if s.BlockedKeys != 1 || s.New != 1 {
			t.Fatalf("stats = %+v, want 1 blocked key and bad#3 waiting", s)
		}
		for _, e := range mb.Events("t") {
			if string(e.Payload) == "bad#3" {
				t.Fatal("bad#3 was delivered while bad#2 is dead: order broken")
			}
		}
		dead, err := st.ListDead(ctx, store.DeadQuery{})
		if err != nil || len(dead) != 1 || string(dead[0].Payload) != "bad#2" {
			t.Fatalf("ListDead = %v, %v", dead, err)
		}
		if want := "permanent: rejected: schema mismatch"; dead[0].LastError != want {
			t.Errorf("LastError = %q, want %q", dead[0].LastError, want)
		}
		// The cause is fixed; the operator requeues; the key catches up in order.
		mu.Lock()
		poisoned = false
		mu.Unlock()
		if n, err := st.RequeueDead(ctx, store.DeadQuery{Key: "bad"}); err != nil || n != 1 {
			t.Fatalf("RequeueDead = %d, %v", n, err)
		}
		waitFor(t, "bad#2 and bad#3", 30*time.Second, func() bool { return pending(t, st).Pending() == 0 })
		stop()
		checkDelivered(t, msgs, mb.Events("t"))
	})
}

func TestSkipKeyPolicyLetsTheKeyMoveOn(t *testing.T) {
	forEachStore(t, func(t *testing.T, st driver.Store, cfg relay.Config) {
		mb := newMem(t, membroker.Config{})
		mb.SetHook(func(e outbox.Event) error {
			if e.Type == "Poison" {
				return broker.Permanent(errors.New("too big for the consumer"))
			}
			return nil
		})
		msgs := []outbox.Message{
			{Topic: "t", Key: "k", Type: "Poison", Payload: []byte("1")},
			{Topic: "t", Key: "k", Type: "Ok", Payload: []byte("2")},
		}
		if err := st.Enqueue(context.Background(), msgs...); err != nil {
			t.Fatal(err)
		}
		cfg.DeadKeys = relay.SkipKey
		run(t, st, mb, cfg)
		waitFor(t, "the second event", 30*time.Second, func() bool { return len(mb.Events("t")) == 1 })
		waitFor(t, "the batch to settle", 10*time.Second, func() bool { return pending(t, st).Pending() == 0 })
		if s := pending(t, st); s.Dead != 1 {
			t.Fatalf("stats = %+v", s)
		}
	})
}

func TestOutOfAttemptsGoesDead(t *testing.T) {
	forEachStore(t, func(t *testing.T, st driver.Store, cfg relay.Config) {
		mb := newMem(t, membroker.Config{})
		mb.SetHook(func(e outbox.Event) error {
			if e.Key == "flaky" {
				return errors.New("timeout")
			}
			return nil
		})
		if err := st.Enqueue(context.Background(), outbox.Message{Topic: "t", Key: "flaky", Type: "T"}, outbox.Message{Topic: "t", Key: "fine", Type: "T"}); err != nil {
			t.Fatal(err)
		}
		cfg.MaxAttempts = 3
		run(t, st, mb, cfg)
		waitFor(t, "the flaky event to die", 30*time.Second, func() bool { return pending(t, st).Dead == 1 })
		dead, err := st.ListDead(context.Background(), store.DeadQuery{})
		if err != nil || len(dead) != 1 {
			t.Fatal(dead, err)
		}
		if dead[0].Attempts != 3 || dead[0].LastError != "gave up after 3 attempts: timeout" {
			t.Errorf("dead = attempts %d, %q", dead[0].Attempts, dead[0].LastError)
		}
		if len(mb.Events("t")) != 1 {
			t.Errorf("the fine key was not delivered")
		}
	})
}

func TestBrokerOutageBacksOffAndRecovers(t *testing.T) {
	forEachStore(t, func(t *testing.T, st driver.Store, cfg relay.Config) {
		mb := newMem(t, membroker.Config{})
		mb.SetDown(true)
		msgs := workload(t, st, "t", 300, 20)
		cfg.BackoffBase = 50 * time.Millisecond
		cfg.BackoffMax = 200 * time.Millisecond
		// An unreachable broker is not the events' fault: no attempt is
		// counted, so even 2 allowed attempts survive any outage.
		cfg.MaxAttempts = 2
		run(t, st, mb, cfg)
		// From the first call on: before it, a relay that orders by
		// ownership waits for its first heartbeat, which a loaded machine
		// may delay for a good part of a second.
		waitFor(t, "the first publish call", 30*time.Second, func() bool { return mb.Stats().Calls > 0 })
		first := mb.Stats().Calls
		time.Sleep(1500 * time.Millisecond)
		calls := mb.Stats().Calls - first
		t.Logf("%d publish calls in 1.5s of outage after the first", calls)
		if calls > 80 {
			t.Errorf("%d publish calls in 1.5s of outage after the first: the relay is not backing off", calls)
		}
		// It keeps trying: three more calls, within a liveness deadline
		// rather than the 1.5 s above, which a starved scheduler (and a
		// relay by ownership, whose claims are one at a time) may not fit
		// three backoffs of 200 ms and their rounds into.
		waitFor(t, "the relay to keep trying (3 publish calls after the first)", 30*time.Second, func() bool { return mb.Stats().Calls-first >= 3 })
		if s := pending(t, st); s.Pending() != int64(len(msgs)) || s.Dead != 0 || s.Retrying != 0 {
			t.Fatalf("during the outage: %+v, want all %d pending, none retrying (no attempt counted)", s, len(msgs))
		}
		mb.SetDown(false)
		waitFor(t, "delivery after the outage", 60*time.Second, func() bool { return pending(t, st).Pending() == 0 })
		checkDelivered(t, msgs, mb.Events("t"))
	})
}

func TestExpiredClaimOfADeadRelayIsTakenOver(t *testing.T) {
	forEachStore(t, func(t *testing.T, st driver.Store, cfg relay.Config) {
		ctx := context.Background()
		msgs := workload(t, st, "t", 50, 5)
		// A relay claims and then "dies": it never acks.
		stale := driver.Lease{Owner: "dead-relay", Epoch: 1}
		own, err := st.Balance(ctx, driver.BalanceParams{Owner: stale.Owner, LeaseFor: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		c, err := st.Claim(ctx, driver.ClaimParams{Lease: stale, Limit: 20, LeaseFor: 500 * time.Millisecond, Shards: own.Held})
		if err != nil || len(c.Events) == 0 {
			t.Fatalf("claim: %d events, %v", len(c.Events), err)
		}
		mb := newMem(t, membroker.Config{})
		run(t, st, mb, cfg)
		waitFor(t, "takeover and delivery", 30*time.Second, func() bool { return pending(t, st).Pending() == 0 })
		checkDelivered(t, msgs, mb.Events("t"))
		if err := st.Ack(ctx, driver.AckParams{Lease: stale, IDs: []int64{c.Events[0].ID}}); !errors.Is(err, driver.ErrLeaseLost) {
			t.Errorf("the dead relay's late ack = %v, want ErrLeaseLost", err)
		}
	})
}

func TestGracefulStopReleasesInFlightWork(t *testing.T) {
	forEachStore(t, func(t *testing.T, st driver.Store, cfg relay.Config) {
		mb := newMem(t, membroker.Config{Latency: 300 * time.Millisecond})
		msgs := workload(t, st, "t", 600, 30)
		cfg.BatchSize = 50
		_, stop := run(t, st, mb, cfg)
		time.Sleep(500 * time.Millisecond)
		began := time.Now()
		stop()
		if d := time.Since(began); d > 5*time.Second {
			t.Errorf("stop took %s", d)
		}
		s := pending(t, st)
		if s.Sending != 0 {
			t.Errorf("%d events still SENDING after a graceful stop: leases not released", s.Sending)
		}
		delivered := map[string]bool{}
		for _, e := range mb.Events("t") {
			delivered[e.EventID] = true
		}
		if int64(len(delivered))+s.Pending() < int64(len(msgs)) {
			t.Errorf("delivered %d + pending %d < %d enqueued: events lost", len(delivered), s.Pending(), len(msgs))
		}
		// A new relay finishes the job, in order.
		mb.SetLatency(0)
		run(t, st, mb, cfg)
		waitFor(t, "the rest", 30*time.Second, func() bool { return pending(t, st).Pending() == 0 })
		checkDelivered(t, msgs, mb.Events("t"))
	})
}
