package relay_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// forEachOpened runs fn once per store kind on a fresh table, with the
// table's database handle.
func forEachOpened(t *testing.T, fn func(t *testing.T, o teststores.Opened)) {
	for _, kind := range teststores.Kinds {
		t.Run(kind, func(t *testing.T) {
			o := teststores.Open(t, kind, store.Options{})
			t.Parallel()
			fn(t, o)
		})
	}
}

// pipelining is a hook that counts the claims that took an event of a key
// whose earlier events were claimed and not settled yet: the pipelining
// across batches that ownership allows.
type pipelining struct {
	mu        sync.Mutex
	open      map[string]int // key → claimed, unsettled events
	byLease   map[driver.Lease][]string
	pipelined int
}

func newPipelining() *pipelining {
	return &pipelining{open: map[string]int{}, byLease: map[driver.Lease][]string{}}
}

func (h *pipelining) OnClaim(_ context.Context, c relay.ClaimInfo) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hit := false
	var keys []string
	for _, e := range c.Events {
		if e.Key != "" {
			hit = hit || h.open[e.Key] > 0
			keys = append(keys, e.Key)
		}
	}
	for _, k := range keys {
		h.open[k]++
	}
	if hit {
		h.pipelined++
	}
	h.byLease[c.Lease] = keys
}

func (h *pipelining) OnSettle(_ context.Context, r relay.BatchReport) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range h.byLease[r.Lease] {
		h.open[k]--
	}
	delete(h.byLease, r.Lease)
}

func (h *pipelining) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pipelined
}

// A hot key's next events are claimed while its earlier ones are still in
// flight (small batches, three workers, a broker with latency), and still
// reach the broker in order: with 1 and with 3 keys, on a broker that
// keeps no order after a failure and on a key-ordered one.
func TestOwnedHotKeyOrderAcrossBatches(t *testing.T) {
	for _, keys := range []int{1, 3} {
		for _, ordered := range []bool{false, true} {
			t.Run(fmt.Sprintf("keys=%d/keyordered=%v", keys, ordered), func(t *testing.T) {
				forEachOpened(t, func(t *testing.T, o teststores.Opened) {
					st := o.Store
					// A key-ordered broker takes a key's claimed events in one
					// call: 20 ms a call keeps one in flight while the next
					// claim runs even when a claim is slow (SQLite under
					// load); otherwise every event is a call of its own.
					latency := 3 * time.Millisecond
					if ordered {
						latency = 20 * time.Millisecond
					}
					mb := newMem(t, membroker.Config{KeyOrdered: ordered, Latency: latency})
					msgs := make([]outbox.Message, 600)
					for i := range msgs {
						k := fmt.Sprintf("k%d", i%keys)
						msgs[i] = outbox.Message{Topic: "t", Key: k, Type: "T", Payload: fmt.Appendf(nil, "%s#%d", k, i/keys+1)}
					}
					if err := st.Enqueue(context.Background(), msgs...); err != nil {
						t.Fatal(err)
					}
					cfg := fastConfig()
					cfg.BatchSize = 25
					cfg.Workers = 3
					// No lease runs out here: "no duplicates without any
					// failure" must not count a claim whose renewal was
					// slower than a 2 s lease on a loaded machine.
					cfg.LeaseFor = 20 * time.Second
					hk := newPipelining()
					cfg.Hooks = []relay.Hook{hk}
					// The first publish waits until a claim has taken a key
					// whose earlier events are in flight: on a loaded
					// machine a claim can take longer than a batch's
					// publishing, and the claims would follow the batches
					// one at a time by chance. A relay that does not
					// pipeline keeps it waiting the 30 s and fails below.
					gate := time.Now().Add(30 * time.Second)
					mb.SetHook(func(outbox.Event) error {
						for hk.count() == 0 && time.Now().Before(gate) {
							time.Sleep(time.Millisecond)
						}
						return nil
					})
					r, stop := run(t, st, mb, cfg)
					// One key: every event waits for the confirmation of
					// the one before it, 600 in a row; under -race on a
					// loaded machine that took over a minute.
					waitFor(t, "delivery", 5*time.Minute, func() bool { return pending(t, st).Pending() == 0 })
					stop()
					checkDelivered(t, msgs, mb.Events("t"))
					if d := len(mb.Events("t")) - len(msgs); d != 0 {
						t.Errorf("%d duplicates without any failure", d)
					}
					p := hk.count()
					t.Logf("%d batches, %d claimed a key whose earlier events were in flight", r.Totals().Batches.Load(), p)
					if p == 0 {
						t.Errorf("no claim took a key with earlier events in flight: the claims did not pipeline")
					}
				})
			})
		}
	}
}

// When a key's event fails, its later events, claimed in the same batch or
// in later ones while it was in flight, are released untried: no attempt
// is counted on them, so they cannot go DEAD behind a flaky predecessor.
// Other keys of the shard keep flowing. Both on a key-ordered broker and
// on one that keeps no order.
func TestOwnedFailureReleasesLaterEventsWithoutAttempt(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("keyordered=%v", ordered), func(t *testing.T) {
			forEachOpened(t, func(t *testing.T, o teststores.Opened) {
				st := o.Store
				ctx := context.Background()
				mb := newMem(t, membroker.Config{KeyOrdered: ordered, Latency: 20 * time.Millisecond})
				mb.SetHook(func(e outbox.Event) error {
					if string(e.Payload) == "k#1" {
						return errors.New("timeout")
					}
					return nil
				})
				var msgs []outbox.Message
				for i := 1; i <= 12; i++ {
					msgs = append(msgs, outbox.Message{Topic: "t", Key: "k", Type: "T", Payload: fmt.Appendf(nil, "k#%d", i)})
					msgs = append(msgs, outbox.Message{Topic: "t", Key: fmt.Sprintf("other%d", i%4), Type: "T", Payload: fmt.Appendf(nil, "other#%d", i)})
				}
				if err := st.Enqueue(ctx, msgs...); err != nil {
					t.Fatal(err)
				}
				cfg := fastConfig()
				cfg.MaxAttempts = 3
				cfg.BatchSize = 4 // k's events span several batches in flight at once
				cfg.Workers = 3
				// A settle write (the release of k's later events) is
				// retried until the batch's lease runs out: on a 2 s lease,
				// SQLite under -race on a loaded machine missed it, and the
				// events stayed SENDING behind the DEAD k#1 (nothing lost,
				// but not the state checked below). No lease runs out here.
				cfg.LeaseFor = 10 * time.Second
				cfg.Logger = failureLog(t)
				run(t, st, mb, cfg)
				waitFor(t, "k#1 to go dead", 30*time.Second, func() bool { return pending(t, st).Dead >= 1 })
				waitFor(t, "the other keys", 30*time.Second, func() bool {
					seen := map[string]bool{}
					for _, e := range mb.Events("t") {
						seen[string(e.Payload)] = true
					}
					return len(seen) >= 12 // each of the 12, not 12 deliveries that may repeat one
				})
				waitFor(t, "the batches to settle", time.Minute, func() bool { return pending(t, st).Sending == 0 })
				time.Sleep(300 * time.Millisecond) // a wrongly counted attempt would show by now
				dead, err := st.ListDead(ctx, store.DeadQuery{})
				if err != nil {
					t.Fatal(err)
				}
				if len(dead) != 1 || string(dead[0].Payload) != "k#1" || dead[0].Attempts != 3 {
					for _, d := range dead {
						t.Errorf("dead: %s attempts=%d %q", d.Payload, d.Attempts, d.LastError)
					}
					t.Fatalf("want only k#1 dead after 3 attempts")
				}
				for _, e := range mb.Events("t") {
					if e.Key == "k" {
						for _, d := range dead {
							t.Logf("dead: %s attempts=%d %q", d.Payload, d.Attempts, d.LastError)
						}
						t.Fatalf("%s delivered while k#1 failed: order broken; the store: %+v", e.Payload, pending(t, st))
					}
				}
				if got := len(mb.Events("t")); got != 12 {
					t.Errorf("delivered %d events, want the 12 of the other keys", got)
				}
				for i := int64(1); i <= 24; i++ {
					r, err := st.Get(ctx, i)
					if errors.Is(err, store.ErrNotFound) {
						continue // delivered
					}
					if err != nil {
						t.Fatal(err)
					}
					if r.Status == outbox.StatusNew && r.Attempts != 0 {
						t.Errorf("%s waits with %d attempts counted, want 0 (it was never tried)", r.Payload, r.Attempts)
					}
				}
				if s := pending(t, st); s.New != 11 || s.Retrying != 0 {
					t.Errorf("stats = %+v: want k#2..k#12 waiting with no attempt counted", s)
				}
			})
		})
	}
}

// A poison event in the shard that every healthy key shares (SQLite has
// one shard) holds only its own key: events of the other keys committed
// before and after it all flow, and so does the poisoned key once requeued.
func TestOwnedPoisonInASharedShardHoldsOnlyItsKey(t *testing.T) {
	forEachOpened(t, func(t *testing.T, o teststores.Opened) {
		st := o.Store
		ctx := context.Background()
		mb := newMem(t, membroker.Config{})
		var cured atomic.Bool
		mb.SetHook(func(e outbox.Event) error {
			if e.Type == "Poison" && !cured.Load() {
				return broker.Permanent(errors.New("rejected"))
			}
			return nil
		})
		msgs := []outbox.Message{{Topic: "t", Key: "bad", Type: "Poison", Payload: []byte("bad#1")}}
		for i := 2; i <= 50; i++ {
			msgs = append(msgs, outbox.Message{Topic: "t", Key: "bad", Type: "Ok", Payload: fmt.Appendf(nil, "bad#%d", i)})
		}
		good := workload(t, st, "t", 300, 30)
		// healthy keys in the poisoned key's own shard (every key, on
		// SQLite's one shard)
		shared := sameShard(t, st, "bad", 5)
		for i := 0; i < 100; i++ {
			k := shared[i%len(shared)]
			good = append(good, outbox.Message{Topic: "t", Key: k, Type: "Ok", Payload: fmt.Appendf(nil, "%s#%d", k, i/len(shared)+1)})
		}
		if err := st.Enqueue(ctx, good[300:]...); err != nil {
			t.Fatal(err)
		}
		if err := st.Enqueue(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
		run(t, st, mb, fastConfig())
		waitFor(t, "the good keys", 30*time.Second, func() bool { return len(mb.Events("t")) >= len(good) })
		// more healthy traffic after the poison went DEAD
		more := make([]outbox.Message, 400)
		for i := range more {
			k := fmt.Sprintf("late%d", i%40)
			more[i] = outbox.Message{Topic: "t", Key: k, Type: "Ok", Payload: fmt.Appendf(nil, "%s#%d", k, i/40+1)}
		}
		if err := st.Enqueue(ctx, more...); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the late keys", 30*time.Second, func() bool { return len(mb.Events("t")) >= len(good)+len(more) })
		waitFor(t, "settled", 10*time.Second, func() bool { s := pending(t, st); return s.Sending == 0 && s.Dead == 1 })
		for _, e := range mb.Events("t") {
			if e.Key == "bad" {
				t.Fatalf("%s delivered while bad#1 is dead", e.Payload)
			}
		}
		if s := pending(t, st); s.New != 49 {
			t.Errorf("stats %+v: want bad#2..bad#50 waiting", s)
		}
		cured.Store(true)
		if n, err := st.RequeueDead(ctx, store.DeadQuery{Key: "bad"}); err != nil || n != 1 {
			t.Fatalf("requeue: %d %v", n, err)
		}
		waitFor(t, "the bad key", 30*time.Second, func() bool { return pending(t, st).Pending() == 0 })
		all := append(append(append([]outbox.Message{}, good...), more...), msgs...)
		checkDelivered(t, all, mb.Events("t"))
	})
}

// sameShard returns n keys other than key that the store puts in key's
// shard: found by asking a store that can say (pgstore's ShardOf), else
// any keys (a store of one shard).
func sameShard(t *testing.T, st driver.Store, key string, n int) []string {
	t.Helper()
	type shardOf interface {
		ShardOf(ctx context.Context, key string, id int64) (int, error)
	}
	so, ok := st.(shardOf)
	var want int
	if ok {
		var err error
		if want, err = so.ShardOf(context.Background(), key, 0); err != nil {
			t.Fatal(err)
		}
	}
	var out []string
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprintf("near%d", i)
		if ok {
			s, err := so.ShardOf(context.Background(), k, 0)
			if err != nil {
				t.Fatal(err)
			}
			if s != want {
				continue
			}
		}
		out = append(out, k)
	}
	return out
}

// shardLog is a HookShards that records the heartbeats.
type shardLog struct {
	mu    sync.Mutex
	infos []relay.ShardInfo
}

func (s *shardLog) OnShards(_ context.Context, i relay.ShardInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.infos = append(s.infos, i)
}

// Relays join and leave while a backlog drains: nothing is lost, no key
// goes out of order, and a relay that leaves hands its shards over at once
// (within one lease period in any case).
func TestOwnedRelaysJoinAndLeaveMidDrain(t *testing.T) {
	forEachOpened(t, func(t *testing.T, o teststores.Opened) {
		st := o.Store
		mb := newMem(t, membroker.Config{Latency: 2 * time.Millisecond})
		msgs := workload(t, st, "t", 3000, 50)
		logger := failureLog(t)
		cfg := func(name string, log *shardLog) relay.Config {
			c := fastConfig()
			c.Owner = name
			c.BatchSize = 50
			c.Hooks = []relay.Hook{log}
			c.Logger = logger
			return c
		}
		// each relay opens a store of its own, as separate processes do
		open := func() driver.Store { return teststores.OpenAt(t, kindOf(t, o), o.URL, o.Opts).Store }
		stA, stB, stC := open(), open(), open()
		logA, logB, logC := &shardLog{}, &shardLog{}, &shardLog{}
		a, stopA := run(t, stA, mb, cfg("relay-a", logA))
		waitFor(t, "relay a to hold shards", 10*time.Second, func() bool { return a.Health().ShardsHeld > 0 })
		b, stopB := run(t, stB, mb, cfg("relay-b", logB))
		if a.Health().Shards > 1 {
			// a gives b its share: revoked, drained, released, taken
			// Two lease periods on a quiet machine; the bound leaves room
			// for -race on a loaded CI machine.
			waitFor(t, "relay b to get a share from a", 10*fastConfig().LeaseFor, func() bool { return b.Health().ShardsHeld > 0 })
		}
		waitFor(t, "some deliveries", 3*time.Minute, func() bool { return len(mb.Events("t")) > 300 })
		// a leaves mid-drain; b (and c, joining) take over
		left := time.Now()
		stopA()
		c, stopC := run(t, stC, mb, cfg("relay-c", logC))
		// At once on a quiet machine (a leaves, b and c take its shards
		// at their next heartbeat), within one lease in any case; the
		// bound leaves room for heartbeats that a loaded machine delays.
		waitFor(t, "the shards to be held again", 10*cfg("", nil).LeaseFor, func() bool {
			return b.Health().ShardsHeld+c.Health().ShardsHeld == a.Health().Shards
		})
		t.Logf("shards held again %v after relay a left", time.Since(left).Round(time.Millisecond))
		waitFor(t, "more deliveries", 3*time.Minute, func() bool { return len(mb.Events("t")) > 1500 })
		stopB()
		waitFor(t, "all delivered", 3*time.Minute, func() bool { return pending(t, st).Pending() == 0 })
		stopC()
		checkDelivered(t, msgs, mb.Events("t"))
		if h := a.Health(); h.ShardsHeld != 0 || !h.Owned {
			t.Errorf("relay a after stopping: %+v", h)
		}
	})
}

// kindOf finds the store kind of an Opened by its URL.
func kindOf(t *testing.T, o teststores.Opened) string {
	switch {
	case len(o.URL) >= 7 && o.URL[:7] == "sqlite:":
		return "sqlite"
	case len(o.URL) >= 6 && o.URL[:6] == "mysql:":
		return "mysql"
	default:
		return "postgres"
	}
}

// Health and the shard hook show what a relay of ownership mode holds.
func TestOwnedHealthAndShardHook(t *testing.T) {
	forEachOpened(t, func(t *testing.T, o teststores.Opened) {
		log := &shardLog{}
		cfg := fastConfig()
		cfg.Hooks = []relay.Hook{log}
		r, stop := run(t, o.Store, newMem(t, membroker.Config{}), cfg)
		waitFor(t, "a shard", 30*time.Second, func() bool { return r.Health().ShardsHeld > 0 })
		h := r.Health()
		if !h.Owned || h.Shards < 1 || h.RelaysSeen != 1 {
			t.Errorf("health %+v", h)
		}
		stop()
		checkShardLog(t, log)
	})
}

// checkShardLog checks the heartbeats a relay's shard hook saw, from its
// start to its stop: shards gained by the first that succeeded, a Leave
// last. A heartbeat may fail on a loaded database (its deadline is half
// the lease): it says so in Err, with nothing else set, and the relay
// heartbeats again.
func checkShardLog(t *testing.T, log *shardLog) (failed int) {
	t.Helper()
	log.mu.Lock()
	defer log.mu.Unlock()
	var ok []relay.ShardInfo
	for _, i := range log.infos {
		if i.Err != nil {
			failed++
			if i.Shards != 0 || i.Relays != 0 || len(i.Held) != 0 || len(i.Gained) != 0 || len(i.Lost) != 0 {
				t.Errorf("a failed heartbeat reports %+v; want Err alone", i)
			}
			t.Logf("a heartbeat failed: %v", i.Err)
			continue
		}
		ok = append(ok, i)
	}
	if len(log.infos) < 2 || len(ok) == 0 || len(ok[0].Gained) == 0 || !log.infos[len(log.infos)-1].Leave {
		t.Fatalf("heartbeats %+v: want shards gained by the first that succeeded and a Leave last", log.infos)
	}
	return failed
}

// A relay whose first heartbeats fail (here behind a lock the test holds
// on the shard table: each runs into its lock timeout or deadline) tells
// the shard hook so, and gains the shards once the lock is gone.
func TestOwnedShardHookAfterFailedHeartbeats(t *testing.T) {
	t.Parallel()
	o := teststores.Open(t, "postgres", store.Options{})
	ctx := context.Background()
	tx, err := o.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `LOCK TABLE "`+o.Opts.Table+`_shards" IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	log := &shardLog{}
	cfg := fastConfig()
	cfg.Hooks = []relay.Hook{log}
	r, stop := run(t, o.Store, newMem(t, membroker.Config{}), cfg)
	waitFor(t, "a heartbeat", 30*time.Second, func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return len(log.infos) > 0
	})
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a shard", 30*time.Second, func() bool { return r.Health().ShardsHeld > 0 })
	stop()
	if failed := checkShardLog(t, log); failed == 0 {
		t.Fatalf("no heartbeat failed while the shard table was locked")
	}
}

// Ownership mode through NATS JetStream: a hot key and many keys, in
// order, all delivered.
func TestOwnedDeliversThroughNATSJetStream(t *testing.T) {
	forEachOpened(t, func(t *testing.T, o teststores.Opened) {
		st := o.Store
		url := testnats.Shared(t)
		s := testnats.NewStream(t, url)
		br, err := natsbroker.Dial(url, natsbroker.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { br.Close(context.Background()) })
		msgs := workload(t, st, s.Topic("orders"), 1200, 3)
		cfg := fastConfig()
		cfg.BatchSize = 50
		run(t, st, br, cfg)
		waitFor(t, "delivery", 60*time.Second, func() bool { return pending(t, st).Pending() == 0 })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		got, err := s.All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		events := make([]outbox.Event, len(got))
		for i, m := range got {
			events[i] = outbox.Event{Message: outbox.Message{EventID: m.Headers.Get("Nats-Msg-Id"), Key: m.Headers.Get("ce-partitionkey"), Payload: m.Data}}
		}
		checkDelivered(t, msgs, events)
	})
}
