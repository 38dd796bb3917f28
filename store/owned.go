package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Ordering by ownership (engine v2).
//
// A store that implements Owned spreads its rows over a fixed number of
// shards, computed by the database from the row alone (so a plain-SQL
// INSERT needs no new column): a keyed row's shard is a hash of event_key,
// a keyless row's is derived from its id. Relays lease shards in the
// database (Balance) and claim only from shards they hold (ClaimOwned).
// One relay owns a key at a time, so it may claim a key's next events
// while the earlier ones are still in flight and order them in memory; a
// claim is never held back by the owner's own in-flight events.
//
// A keyed row is claimable when no earlier row of its key waits for a
// retry or a delayed AvailableAt, is DEAD (HoldDeadKeys), or is parked.
// A row that is not claimable for that reason is parked by the claim that
// meets it: it leaves the claim's index, so no later claim reads past it
// again. A key's parked rows are unparked when its blocking row moves on
// (acked, requeued, purged, or buried with HoldDeadKeys off), lowest ids
// first; Balance also unparks rows whose key holds nothing any more.
//
// Fencing is unchanged: each claim is recorded with its (owner, epoch) and
// every Extend/Ack/Retry/Bury/Release checks it. A shard changes hands
// only when its lease expired or its owner released it; its new owner does
// not claim from it while any live claim of another owner still holds
// events of that shard. Lease times come from the database clock.

// Owned is the optional ability of ordering by ownership; see above. The
// relay uses it when the store has it, and Store.Claim's exclusion rule
// otherwise.
type Owned interface {
	// Balance heartbeats req.Owner as a live relay, renews the leases of
	// the shards it holds, gives up those in req.Release (the relay has
	// settled their work), and takes free or expired shards up to its fair
	// share of the live relays. It returns what the owner holds after the
	// call, marking the shards over its fair share as Revoke.
	Balance(ctx context.Context, req BalanceRequest) (Ownership, error)
	// ClaimOwned takes up to req.Limit ready events from req.Shards under
	// a new claim lease req.Lease, in id order within each shard. Shards
	// that req.Lease.Owner no longer holds under the given epoch, or that a
	// live claim of another owner still touches, are skipped; when it holds
	// none of them any more the error wraps ErrLeaseLost (its view is
	// stale: Balance again). An empty claim means nothing is claimable.
	ClaimOwned(ctx context.Context, req OwnedClaimRequest) (Claim, error)
}

// Sessions is the optional ability of an Owned store to see that a relay
// is gone before its lease ends. Balance keeps a database session of the
// relay's own open (a connection holding a lock named after the table and
// the owner) and records it with the relay's heartbeat; when the database
// has closed that session (the process died: the kernel closed its
// sockets), any other relay's Balance ends the dead relay's membership,
// shard leases and claim leases at once and takes its shards, so a crash
// costs the time to notice it rather than a lease. Fencing is unchanged:
// the takeover is the one a lease's end allows, and the dead relay's
// writes, were it alive after all (its session cut by the network), find
// their claims gone. Where the session lives on (a stopped process, a
// partition the server has not noticed) the lease stays the bound.
type Sessions interface {
	// Orphans reports whether a relay other than owner still holds a
	// live membership while its session has ended: a Balance now takes
	// its shards over. It is one cheap read, for a relay to ask often.
	Orphans(ctx context.Context, owner string) (bool, error)
}

// BalanceRequest is one heartbeat of a relay.
type BalanceRequest struct {
	Owner string
	// LeaseFor is how long the relay's membership and shard leases last
	// from now (database clock); default DefaultLeaseFor.
	LeaseFor time.Duration
	// Release lists shards the relay gives up now; it must have settled
	// (or released) every event it claimed from them.
	Release []int
	// Leave: the relay is stopping; give up every shard and the membership
	// (after its work is settled). Other relays take the shards at once.
	Leave bool
	// HoldDeadKeys is the relay's ClaimRequest.HoldDeadKeys: Balance also
	// unparks rows whose key no longer holds them (a bounded sweep), and a
	// DEAD earlier event holds a key only when this is set.
	HoldDeadKeys bool
}

// Ownership is what a relay holds after Balance.
type Ownership struct {
	Shards int          // the table's number of shards
	Relays int          // live relays, this one included
	Held   []ShardLease // the shards held, in shard order
	Until  time.Time    // when the leases end unless renewed (database clock)
}

// ShardLease is one shard held by a relay.
type ShardLease struct {
	Shard int
	// Epoch increases every time the shard changes hands: a relay that
	// sees a new epoch for a shard it held has lost it in between.
	Epoch int64
	// Revoke: the shard is over this relay's fair share and another relay
	// waits for it; stop claiming from it, settle its events, then Release
	// it.
	Revoke bool
}

// OwnedClaimRequest says what a relay claims from the shards it holds.
type OwnedClaimRequest struct {
	ClaimRequest              // Lease, Limit, LeaseFor and HoldDeadKeys, as for Claim
	Shards       []ShardLease // the shards to claim from (held, not revoked)
}

// Normalize fills OwnedClaimRequest defaults.
func (r OwnedClaimRequest) Normalize() OwnedClaimRequest {
	r.ClaimRequest = r.ClaimRequest.Normalize()
	return r
}

// Normalize fills BalanceRequest defaults.
func (r BalanceRequest) Normalize() BalanceRequest {
	if r.LeaseFor <= 0 {
		r.LeaseFor = DefaultLeaseFor
	}
	return r
}

// Check refuses a request a store cannot carry out on a table of shards
// shards: no owner, an owner longer than 64 bytes, a shard to release that
// does not exist. Its error says what to change.
func (r BalanceRequest) Check(shards int) error {
	if r.Owner == "" {
		return errors.New("the owner is empty; give each relay process a unique owner name")
	}
	if len(r.Owner) > 64 {
		return fmt.Errorf("owner %q is longer than 64 bytes; use a shorter relay name", r.Owner)
	}
	for _, sh := range r.Release {
		if sh < 0 || sh >= shards {
			return fmt.Errorf("shard %d does not exist: a table has shards 0 to %d", sh, shards-1)
		}
	}
	return nil
}

// ErrNothingClaimed marks a ClaimOwned error after which nothing can have
// been claimed (the statement was never sent, or the transaction surely
// rolled back). Any other ClaimOwned error may hide a claim that committed
// while its answer was lost; since an owner's own claims do not hold its
// keys, the relay then claims nothing until such a lease has run out,
// rather than hand out a key's later events ahead of the ones that claim
// would hold. Stores wrap it with %w where they can tell.
var ErrNothingClaimed = errors.New("nothing was claimed")

// OwnedFor returns st's Owned ability, or nil.
func OwnedFor(st Store) Owned {
	o, _ := st.(Owned)
	return o
}
