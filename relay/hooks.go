package relay

import (
	"context"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/store/driver"
)

// Hook is a value that implements one or more of the Hook… interfaces of
// this package; the relay calls those it implements and ignores the rest,
// so that metrics, tracing and a dashboard attach without the engine
// knowing them (franz-go's kgo.Hook works the same way). Hooks are called
// synchronously on the relay's own goroutines, from several at once: they
// must be safe for concurrent use and quick, and must not keep the slices
// they are shown.
type Hook any

// HookClaim is told about every claim, including failed and empty ones.
type HookClaim interface {
	OnClaim(ctx context.Context, c ClaimInfo)
}

// ClaimInfo describes one claim.
type ClaimInfo struct {
	Lease  driver.Lease
	Events []outbox.Event // what was claimed, in id order (read only)
	Took   time.Duration
	Err    error // the store failed; Events is empty
}

// HookPublishStart is told before each publish call (some of a batch's events)
// and returns the context the publish runs under: a tracing hook starts a
// span there, and its end comes to HookPublishEnd with that context. The
// context returned must derive from ctx, which carries the publish's
// deadline and its cancellation when the lease is lost or the relay stops;
// nil keeps ctx.
type HookPublishStart interface {
	OnPublishStart(ctx context.Context, events []outbox.Event) context.Context
}

// HookPublishEnd is told the outcome of each publish call.
type HookPublishEnd interface {
	OnPublishEnd(ctx context.Context, p PublishInfo)
}

// PublishInfo describes one publish call and what the broker answered.
type PublishInfo struct {
	Events  []outbox.Event  // what was sent, in order (read only)
	Results []broker.Result // one per event: Err nil = confirmed, with what the broker said
	Took    time.Duration
}

// HookSettle is told, once per batch, how its outcomes were written to the
// store.
type HookSettle interface {
	OnSettle(ctx context.Context, r BatchReport)
}

// HookLease is told when a batch's lease is renewed, or lost.
type HookLease interface {
	OnLease(ctx context.Context, l LeaseInfo)
}

// LeaseInfo describes a change of a batch's lease.
type LeaseInfo struct {
	Lease driver.Lease
	Lost  bool      // the store refused it, or it could not be renewed in time
	Until time.Time // the local estimate of its end after this change
	Err   error     // why a renewal failed; nil when renewed
}

// HookHealth is told when the store or the broker starts failing as a
// whole, or recovers (the transitions the relay logs).
type HookHealth interface {
	OnHealth(ctx context.Context, h HealthChange)
}

// HealthChange is one such transition.
type HealthChange struct {
	Component string // "store" or "broker"
	Err       error  // nil: recovered
}

// HookShards is told after each heartbeat of a relay whose store orders
// by ownership (driver.Driver): the shards it holds, what changed, and
// whether the heartbeat failed.
type HookShards interface {
	OnShards(ctx context.Context, s ShardInfo)
}

// ShardInfo describes one heartbeat (driver.Driver's Balance).
type ShardInfo struct {
	Shards int                 // the table's number of shards
	Relays int                 // live relays, this one included
	Held   []driver.ShardLease // held after the heartbeat (read only); Revoke marks those being handed over
	// Gained and Lost are the shards taken and lost since the previous
	// heartbeat (a shard held again under a new epoch counts as gained);
	// Released are those given up by this heartbeat after their events
	// were settled.
	Gained, Lost, Released []int
	Leave                  bool  // the relay is stopping and gave up everything
	Err                    error // the heartbeat failed; the other fields are empty
}

// hooks are Config.Hooks sorted by ability, once, in New.
type hooks struct {
	claim        []HookClaim
	publishStart []HookPublishStart
	publishEnd   []HookPublishEnd
	settle       []HookSettle
	lease        []HookLease
	health       []HookHealth
	shards       []HookShards
}

func sortHooks(hs []Hook) hooks {
	var h hooks
	for _, x := range hs {
		if v, ok := x.(HookClaim); ok {
			h.claim = append(h.claim, v)
		}
		if v, ok := x.(HookPublishStart); ok {
			h.publishStart = append(h.publishStart, v)
		}
		if v, ok := x.(HookPublishEnd); ok {
			h.publishEnd = append(h.publishEnd, v)
		}
		if v, ok := x.(HookSettle); ok {
			h.settle = append(h.settle, v)
		}
		if v, ok := x.(HookLease); ok {
			h.lease = append(h.lease, v)
		}
		if v, ok := x.(HookHealth); ok {
			h.health = append(h.health, v)
		}
		if v, ok := x.(HookShards); ok {
			h.shards = append(h.shards, v)
		}
	}
	return h
}

// knownHook reports whether x implements at least one hook interface.
func knownHook(x Hook) bool {
	switch x.(type) {
	case HookClaim, HookPublishStart, HookPublishEnd, HookSettle, HookLease, HookHealth, HookShards:
		return true
	}
	return false
}
