package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/relay/internal/dispatch"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// Ownership mode (the store implements driver.Driver): see the package doc.

// ownership is the relay's view of the shards it holds and the per-key
// dispatcher that orders a key's events across batches.
type ownership struct {
	r  *Relay
	st driver.Driver

	// claimMu serializes the relay's claims, from the snapshot of the
	// shards to the placing of the claimed events' tickets, so that claim
	// order is each key's order. It is taken before mu, and held across
	// the store's round trip: only claims wait for it.
	claimMu sync.Mutex
	// queued: a claim waits for claimMu and no other may queue behind it
	// (see claim). lastFull: the last claim filled its batch.
	queued, lastFull atomic.Bool
	// pausedTill: no claim before this, because a failed claim may have
	// committed without the relay learning its events (see claim).
	// Guarded by claimMu.
	pausedTill time.Time

	// mu guards the shard view and the key chains. It is held for moments
	// and never across a round trip, so a heartbeat, a settle or Health
	// does not wait for a claim's store call.
	mu       sync.Mutex
	held     []driver.ShardLease // claimed from: held and not revoked
	revoking []driver.ShardLease // held, revoked: drained, then released
	// busy counts, per shard, the unsettled batches claimed from it and
	// the claim in flight that may take one: a shard revoked while a claim
	// reads it is not released before that batch settles.
	busy   map[int]int
	keys   map[string]*keyState
	shards int // the table's number of shards (0 before the first Balance)
	relays int // live relays at the last Balance
	// claiming: a claim's store call is in flight (from its snapshot of
	// the shards until its tickets are placed). Its snapshot may predate
	// an outcome written meanwhile, so the tickets of batches settled
	// meanwhile are closed only after it placed its own (later): a key's
	// state is dropped, and a ticket skipped by add, only once every claim
	// that began before its outcome was written is done.
	claiming bool
	later    []*batch

	kick chan struct{} // a revoked shard may have drained: balance now
}

// keyState is one key's claimed events whose outcomes are not written
// yet, in id order (an event claimed again after a failure comes after its
// earlier, given-back ticket of the same id).
type keyState struct {
	tickets []*ticket
	open    int // tickets not settled yet
}

// add places a new ticket and returns the one it waits for: the unsettled
// ticket of the largest smaller id (the newest of that id). An event is
// claimed again after a failure (retried, or released behind one) while
// tickets of later ids may still be unsettled: it does not wait behind
// those, which were released untried, and they do not overtake it,
// since every later event waits for the nearest earlier one. Settled
// tickets are skipped: their outcome is in the store, and the claim that
// took the event saw it (a key's events below a claimed one are either
// claimed with it, unsettled, or hold it back in the store).
func (ks *keyState) add(t *ticket) (prev *ticket) {
	// usually ids grow: append; a reclaimed event goes in its place
	at := len(ks.tickets)
	for at > 0 && ks.tickets[at-1].id > t.id {
		at--
	}
	ks.tickets = slices.Insert(ks.tickets, at, t)
	for i := at - 1; i >= 0; i-- {
		if p := ks.tickets[i]; !p.settled && p.id < t.id {
			return p
		}
	}
	return nil
}

// ticket is one claimed keyed event's place in its key's order. Its latch
// is resolved once its outcome is known: ok when the broker confirmed it
// (the next event of its key may go), not ok when it failed or was given
// back (the next events of its key are released too, untried).
type ticket struct {
	dispatch.Latch
	id int64
	// settled: the outcome is written, and every claim that began before
	// it was is done (guarded by ownership.mu; see ownership.claiming)
	settled bool
}

func poke(w chan struct{}) {
	select {
	case w <- struct{}{}:
	default:
	}
}

// errClaimQueued: the claim was not made, because another one waits to
// start and takes what it would have (see ownership.claim).
var errClaimQueued = errors.New("relay: a claim is queued already")

// errBudgetFull: the claim was not made, because the events held weigh
// Config.MaxInflightBytes already; a settle makes room (budget.room).
var errBudgetFull = errors.New("relay: the in-flight bytes are at MaxInflightBytes")

// errClaimPaused: the claim was not made, because a failed one paused
// claims (see ownership.pausedTill). Not a success either: the store's
// failure stands, so /readyz reports it once it lasts past the grace.
var errClaimPaused = errors.New("relay: claims paused after a failed claim")

func newOwnership(r *Relay, st driver.Driver) *ownership {
	return &ownership{r: r, st: st, busy: map[int]int{}, keys: map[string]*keyState{}, kick: make(chan struct{}, 1)}
}

// claim takes a batch from the held shards and places its keyed events in
// their keys' chains. Claims run one at a time (claimMu); the store's round
// trip runs without mu. It returns a nil batch when nothing was claimed.
//
// It returns errClaimQueued, claiming nothing, when one claim is running,
// another already waits for it, and the last claim did not fill its batch:
// the waiting one starts later, so its snapshot holds everything this one
// could have seen, and while the relay keeps up a third claim in a row
// only repeats it. (Measured at a steady 1,000 plain-SQL events/s with 2
// relay processes, claims often queued two deep behind a slow one.) While
// claims come back full (a backlog) each claims a batch of its own, and
// they queue as before.
func (o *ownership) claim(ctx context.Context, lease driver.Lease) (*batch, driver.Claim, error) {
	if !o.claimMu.TryLock() {
		if !o.lastFull.Load() {
			if !o.queued.CompareAndSwap(false, true) {
				return nil, driver.Claim{Lease: lease}, errClaimQueued
			}
			o.claimMu.Lock()
			o.queued.Store(false)
		} else {
			o.claimMu.Lock()
		}
	}
	defer o.claimMu.Unlock()
	if time.Now().Before(o.pausedTill) {
		return nil, driver.Claim{Lease: lease}, errClaimPaused
	}
	// Under claimMu, so the bytes of the claim before this one are
	// counted: each claim asks for at most what is left, and the relay
	// holds at most the budget plus the one event a claim always takes.
	left, freed := o.r.bytes.room()
	if freed != nil {
		return nil, driver.Claim{Lease: lease}, errBudgetFull
	}
	o.mu.Lock()
	if len(o.held) == 0 {
		o.mu.Unlock()
		return nil, driver.Claim{Lease: lease}, nil
	}
	shards := make([]int, len(o.held))
	for i, l := range o.held {
		shards[i] = l.Shard
		// counted before the store call: a heartbeat that revokes the
		// shard meanwhile does not release it under the claim's batch
		o.busy[l.Shard]++
	}
	held := slices.Clone(o.held)
	o.claiming = true
	o.mu.Unlock()

	claim, err := o.st.Claim(ctx, driver.ClaimParams{
		Lease:        lease,
		Limit:        o.r.cfg.BatchSize,
		LeaseFor:     o.r.cfg.LeaseFor,
		HoldDeadKeys: o.r.cfg.DeadKeys == HoldKey,
		Shards:       held,
		MaxBytes:     left,
	})
	// A claim is full when it took its BatchSize, or more than half the
	// bytes it was allowed: the store does not say whether MaxBytes cut
	// it, and a claim of large events that took most of them likely left
	// more behind (a wrong guess costs one claim that finds less).
	bytes := payloadBytes(claim.Events)
	full := err == nil && (len(claim.Events) >= o.r.cfg.BatchSize || bytes > left/2)
	o.lastFull.Store(full)
	switch {
	case errors.Is(err, driver.ErrLeaseLost):
		// the store says this relay holds none of those shards any
		// more: its view is stale; heartbeat now rather than fail
		poke(o.kick)
		claim, err = driver.Claim{Lease: lease}, nil
	case err != nil && !errors.Is(err, store.ErrNotMigrated) && !errors.Is(err, driver.ErrNothingClaimed):
		// The claim may have committed although its answer was lost (a
		// connection cut, a timeout during COMMIT): its events would be
		// leased to this relay, unknown to the dispatcher, and the store
		// does not let a relay's own claims hold its keys, so the next
		// claim could hand out a key's later events ahead of them. Claim
		// nothing until such a lease has surely run out (its end is at
		// most LeaseFor after now, plus a margin for a statement that
		// outlived its cancelled client); the store then gives those
		// events to the next claim before the later ones of their keys.
		o.pausedTill = time.Now().Add(o.r.cfg.LeaseFor + o.r.cfg.LeaseFor/3)
		o.r.cfg.Logger.Warn("relay: a claim failed and may have committed unseen; claiming again once its lease has run out, so no key's events overtake the ones it may hold",
			"error", err.Error(), "pause", (o.r.cfg.LeaseFor + o.r.cfg.LeaseFor/3).String())
	}

	o.mu.Lock()
	var b *batch
	if err == nil && len(claim.Events) > 0 {
		b = o.place(lease, claim.Events)
		b.shards = shards
		b.bytes, b.full = bytes, full
		o.r.bytes.take(bytes)
	}
	// Only now, with this claim's tickets in place, close those of the
	// batches settled during its store call: its snapshot may predate
	// their outcomes (a retry written NEW with a later next attempt lets
	// it take the key's next event, since the store does not let a
	// relay's own claims hold its keys), and that event then waits behind
	// the failed one instead of finding the key forgotten.
	o.claiming = false
	for _, lb := range o.later {
		o.settleKeys(lb)
	}
	clear(o.later)
	o.later = o.later[:0]
	drained := false
	if b == nil {
		drained = o.unbusy(shards)
	}
	o.mu.Unlock()
	if drained {
		poke(o.kick)
	}
	if b == nil {
		return nil, claim, err
	}
	return b, claim, nil
}

// place makes a batch of claimed events and gives each keyed one its
// ticket behind the previous claimed event of its key (under mu).
func (o *ownership) place(lease driver.Lease, events []outbox.Event) *batch {
	b := &batch{r: o.r, lease: lease, events: events, own: o}
	b.prev = make([]*ticket, len(b.events))
	b.tickets = make([]*ticket, len(b.events))
	b.prevIn = make([]int, len(b.events))
	for i := range b.prevIn {
		b.prevIn[i] = -1
	}
	mine := make(map[*ticket]int)
	for i, e := range b.events {
		if e.Key == "" {
			continue // keyless events need no ticket
		}
		ks := o.keys[e.Key]
		if ks == nil {
			ks = &keyState{}
			o.keys[e.Key] = ks
		}
		t := &ticket{id: e.ID}
		b.prev[i] = ks.add(t)
		ks.open++
		b.tickets[i] = t
		mine[t] = i
	}
	for i, p := range b.prev {
		if j, ok := mine[p]; ok && p != nil {
			b.prevIn[i] = j
		}
	}
	return b
}

// settled closes a batch's places in its keys' chains once its outcomes
// are written, and lets a drained revoked shard go. It does not wait for a
// claim in flight: that claim's snapshot may predate these outcomes, so
// the tickets are then closed when it has placed its own (see claim); the
// shards are let go at once (the claim counts its own in busy).
func (o *ownership) settled(b *batch) {
	o.mu.Lock()
	if o.claiming {
		o.later = append(o.later, b)
	} else {
		o.settleKeys(b)
	}
	drained := o.unbusy(b.shards)
	o.mu.Unlock()
	if drained {
		poke(o.kick)
	}
}

// settleKeys marks a settled batch's tickets settled (under mu, with no
// claim in flight that began before its outcomes were written). A key
// whose chain is then empty is forgotten: its next claimed event goes
// without waiting, and the claim that takes it saw every outcome written.
func (o *ownership) settleKeys(b *batch) {
	for i, e := range b.events {
		t := b.tickets[i]
		if t == nil || t.settled {
			continue
		}
		t.settled = true
		ks := o.keys[e.Key]
		if ks == nil {
			continue
		}
		if ks.open--; ks.open <= 0 {
			delete(o.keys, e.Key)
		} else if ks.open < len(ks.tickets)/2 {
			ks.tickets = slices.DeleteFunc(ks.tickets, func(t *ticket) bool { return t.settled })
		}
	}
}

// unbusy counts a batch (or an empty claim) off its shards and reports
// whether a revoked shard drained (under mu).
func (o *ownership) unbusy(shards []int) (drained bool) {
	for _, s := range shards {
		if o.busy[s]--; o.busy[s] <= 0 {
			delete(o.busy, s)
			drained = drained || slices.ContainsFunc(o.revoking, func(l driver.ShardLease) bool { return l.Shard == s })
		}
	}
	return drained
}

// drained returns the revoked shards with no unsettled batch.
func (o *ownership) drained() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []int
	for _, l := range o.revoking {
		if o.busy[l.Shard] == 0 {
			out = append(out, l.Shard)
		}
	}
	return out
}

// update takes in what Balance returned; it reports the shards gained and
// lost (by shard number) since the previous call.
func (o *ownership) update(own driver.Ownership) (gained, lost []int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	before := map[int]int64{}
	for _, l := range o.held {
		before[l.Shard] = l.Epoch
	}
	for _, l := range o.revoking {
		before[l.Shard] = l.Epoch
	}
	o.held, o.revoking = nil, nil
	now := map[int]bool{}
	for _, l := range own.Held {
		now[l.Shard] = true
		if e, ok := before[l.Shard]; !ok || e != l.Epoch {
			gained = append(gained, l.Shard)
		}
		if l.Revoke {
			o.revoking = append(o.revoking, l)
		} else {
			o.held = append(o.held, l)
		}
	}
	for s := range before {
		if !now[s] {
			lost = append(lost, s)
		}
	}
	slices.Sort(lost)
	o.shards, o.relays = own.Shards, own.Relays
	return gained, lost
}

// short reports whether the relay holds fewer shards than its share
// (the table's shards over the live relays, rounded down).
func (o *ownership) short() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.relays > 0 && len(o.held)+len(o.revoking) < o.shards/o.relays
}

// counts reports the shards held (revoked ones included), the table's
// shards and the live relays, for Health.
func (o *ownership) counts() (held, shards, relays int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.held) + len(o.revoking), o.shards, o.relays
}

// balanceLoop heartbeats every LeaseFor/3 (and at once when a revoked
// shard drained) until ctx ends: it renews the shards, takes the fair
// share, and releases revoked shards once their events are settled.
func (o *ownership) balanceLoop(ctx context.Context) {
	every := o.r.cfg.LeaseFor / 3
	// While a relay holds less than its share, shards are being handed to
	// it (another relay releases them as soon as their work is settled):
	// it looks again soon rather than leave them free for a heartbeat.
	soon := max(20*time.Millisecond, every/100)
	// A relay that joins asks the others (in any process) to heartbeat
	// now, when the store can pass that on: they hand over the shards
	// above their share at once rather than at their next heartbeat.
	var asked <-chan struct{}
	if bn, ok := o.st.(balanceNotifier); ok {
		asked = bn.BalanceNotify(ctx)
	}
	// Where the store can tell that a relay's session has ended (its
	// process died), the relay asks often, and cheaply, whether one has:
	// a Balance then takes the dead relay's shards at once, so a crash
	// costs about this period rather than a lease. A relay whose session
	// lives on (stopped, cut off) keeps its shards until its lease ends.
	// A store without notifications (MariaDB) answers the same question
	// for a relay that joined and waits for its share.
	var watch <-chan time.Time
	sessions, _ := o.st.(driver.Sessions)
	if sessions != nil {
		tick := time.NewTicker(min(every, sessionWatch))
		defer tick.Stop()
		watch = tick.C
	}
	failures := 0
	for {
		wait := every
		if err := o.balance(ctx, false); err != nil {
			failures++
			wait = min(every, jitter(backoff(o.r.cfg.BackoffBase/4, every, failures)))
		} else {
			failures = 0
			if o.short() {
				wait = soon
			}
		}
		// A short relay looks again soon anyway; it does not answer
		// requests to heartbeat (its own among them) meanwhile. A relay
		// backing off after a failed Balance answers neither those
		// requests nor a Rebalance that says yes: another Balance now
		// would only fail sooner. A drained revoked shard (kick) still
		// ends the wait, as handing it over is what the Balance is for.
		ask, look := asked, watch
		if wait == soon || failures > 0 {
			ask = nil
		}
		if failures > 0 {
			look = nil
		}
		t := time.NewTimer(wait)
	waiting:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-o.kick:
			case <-ask:
			case <-t.C:
			case <-look:
				if !o.rebalance(ctx, sessions) {
					continue
				}
			}
			break waiting
		}
		t.Stop()
	}
}

// sessionWatch is how often a relay asks a driver.Sessions whether its
// Balance would move shards on (another relay's session ended, or one
// joined).
const sessionWatch = 500 * time.Millisecond

// rebalance asks whether a Balance now would move shards on. An error is
// no news: the heartbeats go on, and report the store's health.
func (o *ownership) rebalance(ctx context.Context, st driver.Sessions) bool {
	octx, cancel := context.WithTimeout(ctx, 2*sessionWatch)
	defer cancel()
	found, err := st.Rebalance(octx, o.r.cfg.Owner)
	return err == nil && found
}

// balanceNotifier is a driver.Driver that can tell a relay when another one
// is short of its share of the shards (pgstore: a notification).
type balanceNotifier interface {
	BalanceNotify(ctx context.Context) <-chan struct{}
}

// balance runs one Balance; leave gives everything up (the relay has
// settled all its work).
func (o *ownership) balance(ctx context.Context, leave bool) error {
	req := driver.BalanceParams{Owner: o.r.cfg.Owner, LeaseFor: o.r.cfg.LeaseFor, Leave: leave, HoldDeadKeys: o.r.cfg.DeadKeys == HoldKey}
	if !leave {
		req.Release = o.drained()
	}
	// A heartbeat is one round trip that waits for no claim; on a loaded
	// database it may still be slow. Its deadline is half the lease (at
	// least 1 s): time for a slow answer, and for one more try before the
	// leases run out. Meanwhile, and after a failed heartbeat, the relay
	// keeps claiming from the shards it holds: each claim checks in the
	// database that the shard's lease (database clock) is still this
	// relay's under its epoch, so it delivers until the lease has run out
	// and no longer, and fencing stays exact.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(o.r.cfg.LeaseFor/2, time.Second))
	own, err := o.st.Balance(bctx, req)
	cancel()
	info := ShardInfo{Released: req.Release, Leave: leave, Err: err}
	if err != nil {
		o.r.health.set(&o.r.health.store, fmt.Errorf("balance: %w", err))
	} else {
		info.Gained, info.Lost = o.update(own)
		info.Shards, info.Relays, info.Held = own.Shards, own.Relays, own.Held
		if len(info.Gained) > 0 {
			o.r.cfg.Logger.Info("relay: shards taken", "shards", info.Gained, "relays", own.Relays)
			o.r.Wake()
		}
		if drained := o.drained(); !leave && len(drained) > 0 {
			// Shards just marked Revoke are no longer claimed from, and
			// those with no batch in flight will not signal a drain:
			// release them now, not a heartbeat later, or nobody claims
			// their events meanwhile (the other relay waits for them).
			// One this heartbeat asked to release and still holds (the
			// store skipped a locked row) is asked again a little later,
			// not in a tight loop of heartbeats.
			if slices.ContainsFunc(drained, func(s int) bool { return !slices.Contains(req.Release, s) }) {
				poke(o.kick)
			} else {
				time.AfterFunc(max(20*time.Millisecond, o.r.cfg.LeaseFor/300), func() { poke(o.kick) })
			}
		}
	}
	for _, h := range o.r.hooks.shards {
		h.OnShards(ctx, info)
	}
	return err
}

// deliver publishes a batch through the per-key dispatcher (internal/dispatch): an event goes once the previous
// event of its key is confirmed, in this batch or in an earlier one still
// in flight (its ticket), or, on a key-ordered broker, together with it in
// one call; when that event failed or was released, it is released
// too, untried. Each outcome resolves the event's own ticket at once, so
// the key's next events in later batches move on without waiting for this
// batch to end.
func (b *batch) deliver(ctx context.Context) (BatchReport, error) {
	rep := BatchReport{Lease: b.lease, Claimed: len(b.events)}
	pubCtx, end := b.begin(ctx)
	defer end()

	var prev []dispatch.Ticket
	for i, p := range b.prev {
		if p != nil && b.prevIn[i] < 0 {
			if prev == nil {
				prev = make([]dispatch.Ticket, len(b.events))
			}
			prev[i] = p
		}
	}
	brokerErr := b.dispatch(ctx, pubCtx, b.prevIn, prev, func(i int, o dispatch.Outcome) {
		if o == dispatch.Released {
			b.released = append(b.released, b.events[i].ID)
		}
		if t := b.tickets[i]; t != nil {
			t.Resolve(o == dispatch.Confirmed)
		}
	})
	brokerErr = b.brokerOutcome(brokerErr)
	b.brokerHealth(brokerErr)
	return rep, brokerErr
}
