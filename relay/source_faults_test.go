package relay_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/source"
)

// chaos is a broker that fails at random and checks, at each call's start,
// that every event's predecessors of its key were settled (confirmed or
// permanently failed) before, or are earlier in this call (key-ordered).
type chaos struct {
	t        *testing.T
	ordered  bool
	mu       sync.Mutex
	rnd      *rand.Rand
	order    map[string][]int64 // key -> ids in commit order
	keyOf    map[int64]string
	settled  map[int64]bool // confirmed or permanent
	conf     map[int64]int
	perm     map[int64]bool
	fails    map[int64]int // attempts charged
	inFlight int
	maxIn    int
	errs     []string
}

func (c *chaos) Features() broker.Features {
	f := broker.Features{}
	if c.ordered {
		f.Ordering = broker.OrderKey
	}
	return f
}
func (c *chaos) Close(context.Context) error { return nil }
func (c *chaos) Publish(ctx context.Context, evs []outbox.Event) []error {
	return errsOf(c.PublishResults(ctx, evs))
}

func (c *chaos) bad(f string, a ...any) {
	c.errs = append(c.errs, fmt.Sprintf(f, a...))
}

func (c *chaos) PublishResults(ctx context.Context, evs []outbox.Event) []broker.Result {
	c.mu.Lock()
	c.inFlight++
	c.maxIn = max(c.maxIn, c.inFlight)
	inCall := map[int64]int{}
	for i, e := range evs {
		inCall[e.ID] = i
	}
	for i, e := range evs {
		if e.Attempts != c.fails[e.ID] {
			c.bad("event %d sent with Attempts %d, charged %d", e.ID, e.Attempts, c.fails[e.ID])
		}
		if c.conf[e.ID] > 0 || c.perm[e.ID] {
			c.bad("event %d sent again after it was confirmed/buried", e.ID)
		}
		if e.Key == "" {
			continue
		}
		for _, p := range c.order[e.Key] {
			if p == e.ID {
				break
			}
			if c.settled[p] {
				continue
			}
			if j, ok := inCall[p]; ok && c.ordered && j < i {
				continue
			}
			c.bad("key %s: event %d sent while %d before it was unsettled (call %v)", e.Key, e.ID, p, ids(evs))
		}
	}
	d := time.Duration(c.rnd.Intn(3000)) * time.Microsecond
	whole := c.rnd.Intn(40) == 0
	c.mu.Unlock()
	time.Sleep(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight--
	res := make([]broker.Result, len(evs))
	failed := map[string]bool{}
	for i, e := range evs {
		var err error
		switch r := c.rnd.Intn(100); {
		case whole:
			err = fmt.Errorf("down: %w", broker.ErrUnavailable)
		case c.ordered && e.Key != "" && failed[e.Key]:
			err = errors.New("held")
		case r < 3 && !c.perm[e.ID]:
			err = broker.Permanent(errors.New("poison"))
			c.perm[e.ID] = true
			c.settled[e.ID] = true
			c.fails[e.ID]++
		case r < 15 && c.fails[e.ID] < 3:
			err = errors.New("transient")
			c.fails[e.ID]++
		case r < 17:
			err = fmt.Errorf("one: %w", broker.ErrUnavailable)
		default:
			c.conf[e.ID]++
			c.settled[e.ID] = true
		}
		if err != nil && e.Key != "" {
			failed[e.Key] = true
		}
		res[i].Err = err
	}
	return res
}

// newChaos is a chaos broker drawing its faults from seed.
func newChaos(t *testing.T, ordered bool, seed int64) *chaos {
	return &chaos{t: t, ordered: ordered, rnd: rand.New(rand.NewSource(seed * 7)), order: map[string][]int64{},
		keyOf: map[int64]string{}, settled: map[int64]bool{}, conf: map[int64]int{}, perm: map[int64]bool{}, fails: map[int64]int{}}
}

// shape is a BatchSize/Workers pair a random test runs under.
type shape struct{ batch, inFlight int }

// forRandomRuns runs fn as a subtest for each broker ordering (none, key),
// each of two shapes, and 20 seeds.
func forRandomRuns(t *testing.T, fn func(t *testing.T, ordered bool, sh shape, seed int64)) {
	for _, ordered := range []bool{false, true} {
		for _, sh := range []shape{{3, 2}, {1, 3}} {
			for seed := int64(1); seed <= 20; seed++ {
				t.Run(fmt.Sprintf("ordered=%v/batch=%d,inflight=%d/seed=%d", ordered, sh.batch, sh.inFlight, seed), func(t *testing.T) {
					fn(t, ordered, sh, seed)
				})
			}
		}
	}
}

// ids lists the events' ids.
func ids(evs []outbox.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// Random transient, permanent and unreachable-broker results, delays and
// bursts of reads, on a broker that keeps no order and one that keeps a
// key's: at every call's start each event's earlier events of its key are
// settled (or before it in the call, key-ordered), Attempts is what was
// charged, nothing confirmed or buried is sent again, the in-flight bound
// holds; at the end each event was confirmed once or buried, and the ack
// reached the last Position.
func TestSourceRandomFaultsKeepEveryRule(t *testing.T) {
	forRandomRuns(t, func(t *testing.T, ordered bool, sh shape, seed int64) {
		rnd := rand.New(rand.NewSource(seed))
		c := newChaos(t, ordered, seed)
		src := newMemSource()
		cfg := relay.Config{BatchSize: sh.batch, Workers: sh.inFlight, MaxAttempts: 100, BackoffBase: time.Millisecond, BackoffMax: 4 * time.Millisecond}
		l, err := relay.NewSource(src, c, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		keys := []string{"a", "b", "c", "d", ""}
		var id int64
		pos := source.Position(0)
		total := 0
		for round := 0; round < 60; round++ {
			var txns []source.Txn
			for n := rnd.Intn(3) + 1; n > 0; n-- {
				pos++
				tx := source.Txn{Pos: pos}
				for m := rnd.Intn(4); m > 0; m-- {
					id++
					k := keys[rnd.Intn(len(keys))]
					ev := outbox.Event{ID: id, Message: outbox.Message{EventID: outbox.NewEventID(), Topic: "t", Key: k, Type: "T", Payload: []byte("x"), SchemaVersion: 1, ContentType: outbox.DefaultContentType}}
					if rnd.Intn(10) == 0 {
						ev.AvailableAt = time.Now().Add(time.Duration(rnd.Intn(5)) * time.Millisecond)
					}
					c.mu.Lock()
					c.order[k] = append(c.order[k], id)
					c.mu.Unlock()
					tx.Events = append(tx.Events, ev)
					total++
				}
				txns = append(txns, tx)
			}
			src.add(txns...)
			time.Sleep(time.Duration(rnd.Intn(2000)) * time.Microsecond)
		}
		await(t, fmt.Sprintf("ack of %d", pos), func() bool { return src.lastAck() == pos })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, e := range c.errs[:min(len(c.errs), 10)] {
			t.Error(e)
		}
		if c.maxIn > cfg.Workers {
			t.Errorf("%d calls in flight, Workers %d", c.maxIn, cfg.Workers)
		}
		nconf, nperm := 0, 0
		for i := int64(1); i <= id; i++ {
			if c.conf[i] > 1 {
				t.Errorf("event %d confirmed %d times", i, c.conf[i])
			}
			if c.conf[i] > 0 {
				nconf++
			} else if c.perm[i] {
				nperm++
			} else {
				t.Errorf("event %d neither confirmed nor buried", i)
			}
		}
		tot := totals(l)
		if tot.Delivered != int64(nconf) || tot.Dead != int64(nperm) {
			t.Errorf("totals %+v, broker confirmed %d, permanent %d", tot, nconf, nperm)
		}
		if len(src.buriedEvents()) != nperm {
			t.Errorf("buried %d, want %d", len(src.buriedEvents()), nperm)
		}
	})
}

// The same random faults with a stop mid-stream: Run returns, and no
// Position past an unsettled event was acknowledged.
func TestSourceRandomStopsAckNothingUnsettled(t *testing.T) {
	forRandomRuns(t, func(t *testing.T, ordered bool, sh shape, seed int64) {
		rnd := rand.New(rand.NewSource(seed))
		c := newChaos(t, ordered, seed)
		src := newMemSource()
		cfg := relay.Config{BatchSize: sh.batch, Workers: sh.inFlight, MaxAttempts: 100, BackoffBase: time.Millisecond, BackoffMax: 4 * time.Millisecond, DrainTimeout: time.Second}
		l, _ := relay.NewSource(src, c, cfg)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		keys := []string{"a", "b", "c", "d", ""}
		var id int64
		pos := source.Position(0)
		txIDs := map[source.Position][]int64{}
		for round := 0; round < 30; round++ {
			pos++
			tx := source.Txn{Pos: pos}
			for m := rnd.Intn(4); m > 0; m-- {
				id++
				k := keys[rnd.Intn(len(keys))]
				ev := outbox.Event{ID: id, Message: outbox.Message{EventID: outbox.NewEventID(), Topic: "t", Key: k, Type: "T", Payload: []byte("x"), SchemaVersion: 1, ContentType: outbox.DefaultContentType}}
				c.mu.Lock()
				c.order[k] = append(c.order[k], id)
				c.mu.Unlock()
				tx.Events = append(tx.Events, ev)
				txIDs[pos] = append(txIDs[pos], id)
			}
			src.add(tx)
			time.Sleep(time.Duration(rnd.Intn(500)) * time.Microsecond)
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return")
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, e := range c.errs[:min(len(c.errs), 10)] {
			t.Error(e)
		}
		a := src.lastAck()
		for p := source.Position(1); p <= a; p++ {
			for _, i := range txIDs[p] {
				if c.conf[i] == 0 && !c.perm[i] {
					t.Errorf("acked %d past unsettled event %d (txn %d)", a, i, p)
				}
			}
		}
	})
}

// A key's first event goes DEAD while its next ones wait in later sets:
// they are delivered after it, in order, charged no attempt.
func TestSourceDeadEventFirstAcrossSets(t *testing.T) {
	for _, keyOrdered := range []bool{false, true} {
		t.Run(fmt.Sprint(keyOrdered), func(t *testing.T) {
			mb := newBroker(t, membroker.Config{KeyOrdered: keyOrdered})
			nextID = 0
			mb.SetHook(func(e outbox.Event) error {
				if e.ID == 1 {
					return broker.Permanent(errors.New("poison"))
				}
				return nil
			})
			g := &gate{Broker: mb, hold: 1, entered: make(chan struct{}, 1), open: make(chan struct{})}
			src := newMemSource(txn(1, "k"))
			l := startSource(t, src, g, relay.Config{})
			<-g.entered
			src.add(txn(2, "k"))
			time.Sleep(20 * time.Millisecond)
			src.add(txn(3, "k"))
			time.Sleep(20 * time.Millisecond)
			close(g.open)
			await(t, "ack of 3", func() bool { return src.lastAck() == 3 })
			got := mb.Events("")
			checkOrder(t, got)
			if len(got) != 2 {
				t.Fatalf("delivered %v", got)
			}
			for _, e := range got {
				if e.Attempts != 0 {
					t.Fatalf("event %d attempts %d", e.ID, e.Attempts)
				}
			}
			if tot := totals(l); tot.Dead != 1 || tot.Delivered != 2 || tot.Retried != 0 {
				t.Fatalf("totals %+v", tot)
			}
			g.mu.Lock()
			t.Logf("calls %v", g.starts)
			g.mu.Unlock()
		})
	}
}

// A stop while a key's event waits on the latch of one still in flight
// returns promptly, acknowledges nothing, and never sends the waiting one.
func TestSourceStopWithAnEventWaitingOnALatch(t *testing.T) {
	mb := newBroker(t, membroker.Config{})
	nextID = 0
	g := &gate{Broker: mb, hold: 1, entered: make(chan struct{}, 1), open: make(chan struct{})}
	src := newMemSource(txn(1, "k"))
	l, _ := relay.NewSource(src, g, fast(relay.Config{DrainTimeout: 100 * time.Millisecond}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	<-g.entered
	src.add(txn(2, "k", "j"))
	await(t, "j", func() bool { return len(mb.Events("")) == 1 })
	src.add(txn(3, "k"))
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("Run did not return")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %v", d)
	}
	if a := src.lastAck(); a != 0 {
		t.Fatalf("acked %d", a)
	}
	if n := g.calls(2); n != 0 {
		t.Fatalf("event 2 sent")
	}
}

// blip is a membroker whose first call fails as a whole with ErrUnavailable.
type blip struct {
	*membroker.Broker
	mu    sync.Mutex
	calls int
}

func (b *blip) PublishResults(ctx context.Context, evs []outbox.Event) []broker.Result {
	b.mu.Lock()
	b.calls++
	first := b.calls == 1
	b.mu.Unlock()
	if first {
		res := make([]broker.Result, len(evs))
		for i := range res {
			res[i].Err = fmt.Errorf("blip: %w", broker.ErrUnavailable)
		}
		return res
	}
	return b.Broker.PublishResults(ctx, evs)
}
func (b *blip) Publish(ctx context.Context, evs []outbox.Event) []error {
	return errsOf(b.PublishResults(ctx, evs))
}

// One unreachable call of 20 events of distinct keys pauses the loop one
// step of backoff (at most BackoffBase), not twenty (it did, before).
func TestSourceOneUnavailableCallPausesOneStep(t *testing.T) {
	mb := newBroker(t, membroker.Config{})
	b := &blip{Broker: mb}
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	src := newMemSource(txn(1, keys...))
	begin := time.Now()
	startSource(t, src, b, relay.Config{BackoffBase: 10 * time.Millisecond, BackoffMax: 5 * time.Second})
	await(t, "ack", func() bool { return src.lastAck() == 1 })
	if d := time.Since(begin); d > 500*time.Millisecond {
		t.Fatalf("one unreachable call paused the loop %v (BackoffBase 10ms)", d)
	}
}
