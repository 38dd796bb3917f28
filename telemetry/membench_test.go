package telemetry_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// memStore is a driver.Store that costs next to nothing: a slice of
// pre-made events handed out in order, acks counted and forgotten. It
// exists for BenchmarkTelemetryOverhead/mem, where the relay's own work is
// all the work there is, so that the hooks' share of it is as large as it
// can get (a real store and broker only add work the hooks do not grow
// with). It has one shard, and keeps no lease, retry or dead letter: the benchmark's broker
// confirms everything.
type memStore struct {
	mu     sync.Mutex
	events []outbox.Event
	next   int   // events[:next] were claimed
	acked  int64 // of those, acked
	nextID int64
}

var _ driver.Store = (*memStore)(nil)

func (m *memStore) Migrate(context.Context) error { return nil }

// Enqueue appends the messages to the backlog, ids in order.
func (m *memStore) Enqueue(_ context.Context, msgs ...outbox.Message) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.next == len(m.events) { // drained: start afresh
		m.events, m.next, m.acked = m.events[:0], 0, 0
	}
	now := time.Now()
	for _, msg := range msgs {
		m.nextID++
		m.events = append(m.events, outbox.Event{ID: m.nextID, Message: msg.Normalized(), CreatedAt: now})
	}
	return nil
}

func (m *memStore) EnqueueTx(context.Context, store.Execer, ...outbox.Message) error {
	return fmt.Errorf("memStore: EnqueueTx: it has no database; use Enqueue")
}

// Balance gives the only relay the only shard.
func (m *memStore) Balance(_ context.Context, req driver.BalanceParams) (driver.Ownership, error) {
	req = req.WithDefaults()
	own := driver.Ownership{Shards: 1, Relays: 1, Until: time.Now().Add(req.LeaseFor)}
	if !req.Leave {
		own.Held = []driver.ShardLease{{Shard: 0, Epoch: 1}}
	}
	return own, nil
}

// Claim hands out the next events in order.
func (m *memStore) Claim(_ context.Context, req driver.ClaimParams) (driver.Claim, error) {
	req = req.WithDefaults()
	m.mu.Lock()
	defer m.mu.Unlock()
	end := min(m.next+req.Limit, len(m.events))
	c := driver.Claim{Lease: req.Lease, Until: time.Now().Add(req.LeaseFor), Events: m.events[m.next:end:end]}
	m.next = end
	if len(c.Events) == 0 {
		c.Events = nil
	}
	return c, nil
}

func (m *memStore) Extend(_ context.Context, p driver.ExtendParams) (time.Time, error) {
	return time.Now().Add(p.For), nil
}

func (m *memStore) Ack(_ context.Context, p driver.AckParams) error {
	ids := p.IDs
	m.mu.Lock()
	m.acked += int64(len(ids))
	m.mu.Unlock()
	return nil
}

// AckClaim acks the claim's N events.
func (m *memStore) AckClaim(_ context.Context, p driver.AckClaimParams) error {
	m.mu.Lock()
	m.acked += int64(p.N)
	m.mu.Unlock()
	return nil
}

func (m *memStore) Retry(context.Context, driver.RetryParams) error {
	return fmt.Errorf("memStore: Retry: the benchmark's broker confirms everything")
}
func (m *memStore) Bury(context.Context, driver.BuryParams) error {
	return fmt.Errorf("memStore: Bury: the benchmark's broker confirms everything")
}
func (m *memStore) Release(context.Context, driver.ReleaseParams) error {
	return fmt.Errorf("memStore: Release: the benchmark's broker confirms everything")
}
func (m *memStore) Get(context.Context, int64) (store.Record, error) {
	return store.Record{}, store.ErrNotFound
}
func (m *memStore) ListDead(context.Context, store.DeadQuery) ([]store.Record, error) {
	return nil, nil
}
func (m *memStore) RequeueDead(context.Context, store.DeadQuery) (int64, error) { return 0, nil }
func (m *memStore) Purge(context.Context, store.PurgeRequest) (int64, error)    { return 0, nil }

func (m *memStore) Stats(context.Context) (store.Stats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := store.Stats{New: int64(len(m.events) - m.next), Sending: int64(m.next) - m.acked}
	if m.next < len(m.events) {
		s.OldestPending = time.Since(m.events[m.next].CreatedAt)
	}
	return s, nil
}

func (m *memStore) Close() error { return nil }
