package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
)

// Errors of the seam.
var (
	// ErrLeaseLost: the rows are no longer held by this (owner, epoch): the
	// lease expired and another relay took them, or they were acked already.
	// Nothing was changed.
	ErrLeaseLost = errors.New("store: lease lost: these events are no longer held by this claim (its lease expired and another relay may have taken them, or they were settled already); nothing was changed")
	// ErrNothingClaimed marks a Claim error after which nothing can have
	// been claimed (the statement was never sent, or the transaction
	// surely rolled back). Any other Claim error may hide a claim that
	// committed while its answer was lost; since an owner's own claims do
	// not hold its keys, the relay then claims nothing until such a lease
	// has run out, rather than hand out a key's later events ahead of the
	// ones that claim would hold. Stores wrap it with %w where they can
	// tell.
	ErrNothingClaimed = errors.New("nothing was claimed")
)

// Defaults of the Params.
const (
	DefaultLimit    = 100
	DefaultLeaseFor = 30 * time.Second
)

// Driver is what the relay engine needs from a database, one method per
// statement (or per round trip of statements).
type Driver interface {
	// Balance heartbeats p.Owner as a live relay, renews the leases of
	// the shards it holds, gives up those in p.Release (the relay has
	// settled their work), and takes free or expired shards up to its fair
	// share of the live relays. It returns what the owner holds after the
	// call, marking the shards over its fair share as Revoke.
	Balance(ctx context.Context, p BalanceParams) (Ownership, error)
	// Claim takes up to p.Limit ready events (and, with p.MaxBytes, up to
	// that many payload bytes) from p.Shards under a new claim lease
	// p.Lease, in id order within each shard. Shards that
	// p.Lease.Owner no longer holds under the given epoch, or that a live
	// claim of another owner still touches, are skipped; when it holds
	// none of them any more the error wraps ErrLeaseLost (its view is
	// stale: Balance again). An empty claim means nothing is claimable.
	Claim(ctx context.Context, p ClaimParams) (Claim, error)
	// Extend renews the lease of the claim until now+p.For (database
	// clock); every id must still be in it.
	Extend(ctx context.Context, p ExtendParams) (time.Time, error)
	// Ack marks ids delivered: deletes them, or moves them to the archive
	// table as SENT when the store keeps sent events. ErrLeaseLost if any
	// id is no longer held by the lease (the others are still acked).
	Ack(ctx context.Context, p AckParams) error
	// AckClaim acks every event of the claim p.Lease, which took p.N
	// events, without listing them (the relay's common case): ErrLeaseLost
	// when the claim is no longer this lease's (taken over: nothing is
	// changed) or fewer than p.N of its events were left.
	AckClaim(ctx context.Context, p AckClaimParams) error
	// Retry gives events back for a later attempt: attempts+1, next
	// attempt after Delay, last_error set.
	Retry(ctx context.Context, p RetryParams) error
	// Bury marks events DEAD with their reason (attempts+1).
	Bury(ctx context.Context, p BuryParams) error
	// Release gives unfinished events back untouched (graceful stop, or
	// held behind a failed event of their key).
	Release(ctx context.Context, p ReleaseParams) error
}

// Store is a store with its driver, as every store of this module is: what
// the CLI and the test fixtures hand to both the operator's tools and the
// relay.
type Store interface {
	store.Store
	Driver
}

// Sessions is the optional ability of a Driver to see that a relay is
// gone before its lease ends. Balance keeps a database session of the
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
	// Rebalance reports whether owner's Balance now would move shards
	// on: a relay other than owner still holds a live membership while
	// its session has ended (the Balance takes its shards), or, in a
	// store with no notification to carry a joining relay's request
	// (MariaDB), owner holds more than its share while another live
	// relay holds less than the smallest share (the Balance revokes the
	// surplus). It is one cheap read, for a relay to ask often.
	Rebalance(ctx context.Context, owner string) (bool, error)
}

// Notifier is an optional ability: a channel that receives a value soon after
// events are committed (LISTEN/NOTIFY, or an in-process signal). Only a hint:
// the relay still polls.
type Notifier interface {
	Notify(ctx context.Context) <-chan struct{}
}

// Watcher is an optional ability of a Notifier: Watching reports that its
// channel receives a value soon after every commit the store can see,
// however the commit was made (a commit probe runs; see ProbePace), and
// not only after those that sent a notification. A relay then needs no
// looks of its own after a round that found events (each would be a claim
// that mostly finds nothing).
type Watcher interface {
	Watching() bool
}

// Lease identifies one claim: only the holder of (Owner, Epoch) may change
// the claimed rows.
type Lease struct {
	Owner string // unique per relay process
	Epoch int64  // fencing token: unique per claim of that owner, increasing
}

// ClaimParams says what a relay claims from the shards it holds.
type ClaimParams struct {
	Lease Lease
	// Limit is the most events to take; default DefaultLimit.
	Limit int
	// LeaseFor is how long the claim holds before others may take it;
	// default DefaultLeaseFor.
	LeaseFor time.Duration
	// HoldDeadKeys: a DEAD event holds the later events of its key until an
	// operator requeues or purges it. This keeps order; set false to move on.
	HoldDeadKeys bool
	// Shards are the shards to claim from (held, not revoked).
	Shards []ShardLease
	// MaxBytes, when above 0, bounds the claim's payload bytes (the sum
	// of len(Event.Payload)): the claim stops before the first event that
	// would take the sum past it, so the events it returns are a prefix,
	// in id order, of those it would return without the bound. It always
	// returns at least one event when any is claimable: an event larger
	// than MaxBytes goes alone. 0 means no bound.
	MaxBytes int64
}

// WithDefaults returns p with its defaults filled in.
func (p ClaimParams) WithDefaults() ClaimParams {
	if p.Limit <= 0 {
		p.Limit = DefaultLimit
	}
	if p.LeaseFor <= 0 {
		p.LeaseFor = DefaultLeaseFor
	}
	return p
}

// Claim is the result of Driver.Claim.
type Claim struct {
	Lease  Lease
	Until  time.Time // lease expiry, database clock
	Events []outbox.Event
	// Buried are the events the claim itself marked DEAD because their
	// rows break the table contract (see ScreenClaim; a store may bury a
	// row it cannot claim at all, as pgstore does a largest-bigint id);
	// they are not in Events. The relay logs and counts them like its own
	// burials.
	Buried []Burial
}

// ExtendParams renews a claim's lease.
type ExtendParams struct {
	Lease Lease
	IDs   []int64
	For   time.Duration // the new lease runs until now+For
}

// AckParams acks some events of a claim.
type AckParams struct {
	Lease Lease
	IDs   []int64
}

// AckClaimParams acks a whole claim of N events.
type AckClaimParams struct {
	Lease Lease
	N     int
}

// RetryParams gives events of a claim back for a later attempt.
type RetryParams struct {
	Lease   Lease
	Retries []Retry
}

// BuryParams marks events of a claim DEAD.
type BuryParams struct {
	Lease   Lease
	Burials []Burial
}

// ReleaseParams gives events of a claim back untouched.
type ReleaseParams struct {
	Lease Lease
	IDs   []int64
}

// Retry is one event to try again later.
type Retry struct {
	ID    int64
	Delay time.Duration
	Error string
}

// Burial is one event to mark DEAD.
type Burial struct {
	ID    int64
	Error string
}

// BalanceParams is one heartbeat of a relay.
type BalanceParams struct {
	Owner string
	// LeaseFor is how long the relay's membership and shard leases last
	// from now (database clock); default DefaultLeaseFor.
	LeaseFor time.Duration
	// Release lists shards the relay gives up now; it must have settled
	// (or released) every event it claimed from them, and have no claim
	// of them in flight: another relay may claim them at once.
	Release []int
	// Leave: the relay is stopping; give up every shard and the membership
	// (after its work is settled and with no claim in flight). Other
	// relays take the shards at once.
	Leave bool
	// HoldDeadKeys is the relay's ClaimParams.HoldDeadKeys: Balance also
	// unparks rows whose key no longer holds them (a bounded sweep), and a
	// DEAD earlier event holds a key only when this is set.
	HoldDeadKeys bool
}

// WithDefaults returns p with its defaults filled in.
func (p BalanceParams) WithDefaults() BalanceParams {
	if p.LeaseFor <= 0 {
		p.LeaseFor = DefaultLeaseFor
	}
	return p
}

// Validate refuses a heartbeat a store cannot carry out on a table of
// shards shards: no owner, an owner longer than 64 bytes, a shard to
// release that does not exist. Its error says what to change.
func (p BalanceParams) Validate(shards int) error {
	if p.Owner == "" {
		return errors.New("the owner is empty; give each relay process a unique owner name")
	}
	if len(p.Owner) > 64 {
		return fmt.Errorf("owner %q is longer than 64 bytes; use a shorter relay name", p.Owner)
	}
	for _, sh := range p.Release {
		if sh < 0 || sh >= shards {
			return fmt.Errorf("shard %d does not exist: a table has shards 0 to %d", sh, shards-1)
		}
	}
	return nil
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
