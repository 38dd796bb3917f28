package relay

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Health is a snapshot of how a relay is doing, for readiness checks and
// status pages: a relay is unwell when the store or broker has been failing
// for a while, or when work is waiting and nothing was delivered for a
// while (compare LastDelivered with the oldest pending event).
type Health struct {
	// StoreError and BrokerError are the current failures (empty when
	// fine), and the Since times when they started.
	StoreError, BrokerError               string
	StoreFailingSince, BrokerFailingSince time.Time
	// LastClaim is when a claim last succeeded (found events or not).
	LastClaim time.Time
	// LastDelivered is when an event was last confirmed by the broker and
	// acknowledged to the store; zero before the first.
	LastDelivered time.Time
	// InFlight is how many claimed events are not settled yet.
	InFlight int64
	// InflightBytes is how many payload bytes those events hold, against
	// Config.MaxInflightBytes.
	InflightBytes int64
	// Claimed … Released are the counters of Totals.
	Claimed, Delivered, Retried, Dead, Released, Batches int64
	// A relay over a store (New) leases shards: Owned is set; ShardsHeld
	// is how many of the table's Shards this relay holds (those being
	// handed over included), RelaysSeen how many live relays the last
	// heartbeat counted. Zero for a relay over a source (NewSource).
	Owned                          bool
	ShardsHeld, Shards, RelaysSeen int
}

// Health returns the relay's current health snapshot.
func (r *Relay) Health() Health {
	h := Health{
		LastClaim:     unixNano(r.lastClaim.Load()),
		LastDelivered: unixNano(r.lastDelivered.Load()),
		InFlight:      r.inFlight.Load(),
		InflightBytes: r.bytes.held.Load(),
		Claimed:       r.totals.Claimed.Load(),
		Delivered:     r.totals.Delivered.Load(),
		Retried:       r.totals.Retried.Load(),
		Dead:          r.totals.Dead.Load(),
		Released:      r.totals.Released.Load(),
		Batches:       r.totals.Batches.Load(),
	}
	if r.own != nil {
		h.Owned = true
		h.ShardsHeld, h.Shards, h.RelaysSeen = r.own.counts()
	}
	r.health.mu.Lock()
	h.StoreError, h.StoreFailingSince = r.health.store.err, r.health.store.since
	h.BrokerError, h.BrokerFailingSince = r.health.broker.err, r.health.broker.since
	r.health.mu.Unlock()
	return h
}

func unixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// health logs once per change of state, not once per attempt, and tells
// the HookHealth hooks.
type health struct {
	mu  sync.Mutex
	log interface {
		Warn(string, ...any)
		Info(string, ...any)
	}
	hooks  []HookHealth
	store  failing
	broker failing
}

// failing is one component's state: its error text (empty when fine) and
// since when, and when a change of its error was last logged.
type failing struct {
	name   string
	err    string
	since  time.Time
	logged time.Time
}

// changeLogEvery bounds how often a component that keeps failing, but now
// with another error, is logged again: often enough that the real reason
// shows soon after the first symptom (a closed connection, then the
// reconnect refused for its credentials), rarely enough that errors naming
// each event cannot flood the log.
const changeLogEvery = 30 * time.Second

func (h *health) set(f *failing, err error) {
	h.mu.Lock()
	changed := false
	switch {
	case err == nil && f.err != "":
		h.log.Info("relay: " + f.name + " recovered")
		f.err, f.since = "", time.Time{}
		changed = true
	case err != nil && f.err == "":
		f.err, f.since, f.logged = err.Error(), time.Now(), time.Now()
		h.log.Warn("relay: "+f.name+" failing; backing off and retrying", "error", err.Error())
		changed = true
	case err != nil && err.Error() != f.err && time.Since(f.logged) >= changeLogEvery:
		// Still failing, differently: the state (Health, /readyz) tells
		// the current reason, and the log says it too.
		f.err, f.logged = err.Error(), time.Now()
		h.log.Warn("relay: "+f.name+" still failing, now differently; backing off and retrying", "error", err.Error(), "failing_for", time.Since(f.since).Round(time.Second))
	}
	hooks := h.hooks
	h.mu.Unlock()
	if changed {
		for _, hk := range hooks {
			hk.OnHealth(context.Background(), HealthChange{Component: f.name, Err: err})
		}
	}
}

// stamp records now in t.
func stamp(t *atomic.Int64) { t.Store(time.Now().UnixNano()) }
