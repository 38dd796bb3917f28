package relay_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/source"
)

// memSource is a Source over transactions given up front.
type memSource struct {
	mu     sync.Mutex
	txns   []source.Txn
	acked  []source.Position
	buried []source.Burial
	wake   chan struct{}
	nexts  atomic.Int64 // calls of Next: the reader calls again once the loop took the last read
}

func newMemSource(txns ...source.Txn) *memSource {
	return &memSource{txns: txns, wake: make(chan struct{}, 1)}
}

func (s *memSource) add(txns ...source.Txn) {
	s.mu.Lock()
	s.txns = append(s.txns, txns...)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *memSource) Next(ctx context.Context) ([]source.Txn, error) {
	s.nexts.Add(1)
	for {
		s.mu.Lock()
		if len(s.txns) > 0 {
			out := s.txns
			s.txns = nil
			s.mu.Unlock()
			return out, nil
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.wake:
		}
	}
}

func (s *memSource) Ack(_ context.Context, pos source.Position) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acked = append(s.acked, pos)
	return nil
}

func (s *memSource) Bury(_ context.Context, p []source.Burial) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buried = append(s.buried, p...)
	return nil
}

func (s *memSource) lastAck() source.Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.acked) == 0 {
		return 0
	}
	return s.acked[len(s.acked)-1]
}

func (s *memSource) buriedEvents() []source.Burial {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]source.Burial(nil), s.buried...)
}

var nextID int64

// txn builds a transaction at pos with one event per key given.
func txn(pos source.Position, keys ...string) source.Txn {
	t := source.Txn{Pos: pos}
	for _, k := range keys {
		nextID++
		t.Events = append(t.Events, outbox.Event{ID: nextID, Message: outbox.Message{
			EventID: outbox.NewEventID(), Topic: "t", Key: k, Type: "T", Payload: []byte(fmt.Sprint(nextID)),
			SchemaVersion: 1, ContentType: outbox.DefaultContentType}})
	}
	return t
}

func fast(cfg relay.Config) relay.Config {
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase = 5 * time.Millisecond
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = 20 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	return cfg
}

// sourceTotals are a relay's Totals, read once.
type sourceTotals struct{ Delivered, Retried, Dead int64 }

func totals(r *relay.Relay) sourceTotals {
	t := r.Totals()
	return sourceTotals{Delivered: t.Delivered.Load(), Retried: t.Retried.Load(), Dead: t.Dead.Load()}
}

// claimHook and settleHook are hooks made of a function.
type claimHook func(relay.ClaimInfo)

func (h claimHook) OnClaim(_ context.Context, c relay.ClaimInfo) { h(c) }

type settleHook func(relay.BatchReport)

func (h settleHook) OnSettle(_ context.Context, r relay.BatchReport) { h(r) }

// startSource runs a relay over src until the test ends.
func startSource(t *testing.T, src source.Source, b broker.Broker, cfg relay.Config) *relay.Relay {
	t.Helper()
	l, err := relay.NewSource(src, b, fast(cfg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return l
}

func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// checkOrder fails unless, per key, the first deliveries come in id order.
func checkOrder(t *testing.T, got []outbox.Event) {
	t.Helper()
	last := map[string]int64{}
	seen := map[int64]bool{}
	for _, e := range got {
		if seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		if e.Key != "" && e.ID < last[e.Key] {
			t.Fatalf("key %s: event %d delivered after %d", e.Key, e.ID, last[e.Key])
		}
		last[e.Key] = e.ID
	}
}

func newBroker(t *testing.T, cfg membroker.Config) *membroker.Broker {
	b, err := membroker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// gate is a broker that holds the calls carrying event hold until open is
// closed, and logs which events each call carried, when it started.
type gate struct {
	*membroker.Broker
	hold    int64
	entered chan struct{}
	open    chan struct{}
	mu      sync.Mutex
	starts  [][]int64
}

func (g *gate) PublishResults(ctx context.Context, evs []outbox.Event) []broker.Result {
	ids := make([]int64, len(evs))
	held := false
	for i, e := range evs {
		ids[i] = e.ID
		held = held || e.ID == g.hold
	}
	g.mu.Lock()
	g.starts = append(g.starts, ids)
	g.mu.Unlock()
	if held {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		select {
		case <-g.open:
		case <-ctx.Done():
		}
	}
	return g.Broker.PublishResults(ctx, evs)
}

func (g *gate) Publish(ctx context.Context, evs []outbox.Event) []error {
	return errsOf(g.PublishResults(ctx, evs))
}

// errsOf is each result's error, for a Publish built on PublishResults.
func errsOf(res []broker.Result) []error {
	errs := make([]error, len(res))
	for i := range res {
		errs[i] = res[i].Err
	}
	return errs
}

// callOf returns the first call that carried event id.
func (g *gate) callOf(id int64) []int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.starts {
		if slices.Contains(c, id) {
			return c
		}
	}
	return nil
}

// calls returns how many calls carried event id.
func (g *gate) calls(id int64) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, c := range g.starts {
		for _, x := range c {
			if x == id {
				n++
			}
		}
	}
	return n
}

// unitBroker is a broker whose ordered unit is the call (a Kafka
// partition shared by every key): once an event fails, the later events
// of the call, whatever their key, are not sent (broker.ErrNotAttempted).
type unitBroker struct{ *membroker.Broker }

func (p unitBroker) Features() broker.Features {
	return broker.Features{Ordering: broker.OrderPartition}
}

func (p unitBroker) PublishResults(ctx context.Context, evs []outbox.Event) []broker.Result {
	out := make([]broker.Result, len(evs))
	failed := false
	for i := range evs {
		if failed {
			out[i].Err = fmt.Errorf("not sent behind a failure (%w)", broker.ErrNotAttempted)
			continue
		}
		out[i] = p.Broker.PublishResults(ctx, evs[i:i+1])[0]
		failed = out[i].Err != nil
	}
	return out
}

func (p unitBroker) Publish(ctx context.Context, evs []outbox.Event) []error {
	return errsOf(p.PublishResults(ctx, evs))
}
