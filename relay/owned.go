package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
)

// Ownership mode (the store implements store.Owned): see the package doc.

// ownership is the relay's view of the shards it holds and the per-key
// dispatcher that orders a key's events across batches.
type ownership struct {
	r  *Relay
	st store.Owned

	// mu serializes the relay's claims and every change of keys, so that
	// claim order is each key's order, and a key's state is dropped only
	// between claims.
	mu       sync.Mutex
	held     []store.ShardLease // claimed from: held and not revoked
	revoking []store.ShardLease // held, revoked: drained, then released
	busy     map[int]int        // shard → unsettled batches claimed from it
	keys     map[string]*keyState
	shards   int // the table's number of shards (0 before the first Balance)
	relays   int // live relays at the last Balance
	// pausedTill: no claim before this, because a failed claim may have
	// committed without the relay learning its events (see claim).
	pausedTill time.Time

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
// claimed again after a failure (retried, or given back behind one) while
// tickets of later ids may still be unsettled: it does not wait behind
// those, which were given back untried, and they do not overtake it,
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

// ticket is one claimed keyed event's place in its key's order. done is
// closed once its outcome is known: ok when the broker confirmed it (the
// next event of its key may go), not ok when it failed or was given back
// (the next events of its key are given back too, untried).
type ticket struct {
	id      int64
	settled bool // the outcome is written (guarded by ownership.mu)

	mu      sync.Mutex
	done    bool
	ok      bool
	waiters []chan struct{}
}

// resolve records the outcome and tells the waiters. Only the first call
// counts.
func (t *ticket) resolve(ok bool) {
	t.mu.Lock()
	if t.done {
		t.mu.Unlock()
		return
	}
	t.done, t.ok = true, ok
	ws := t.waiters
	t.waiters = nil
	t.mu.Unlock()
	for _, w := range ws {
		poke(w)
	}
}

// state reports whether the outcome is known, and whether it was ok.
func (t *ticket) state() (done, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.done, t.ok
}

// notify pokes w when the outcome is known (at once if it is).
func (t *ticket) notify(w chan struct{}) {
	t.mu.Lock()
	if !t.done {
		t.waiters = append(t.waiters, w)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	poke(w)
}

func poke(w chan struct{}) {
	select {
	case w <- struct{}{}:
	default:
	}
}

func newOwnership(r *Relay, st store.Owned) *ownership {
	return &ownership{r: r, st: st, busy: map[int]int{}, keys: map[string]*keyState{}, kick: make(chan struct{}, 1)}
}

// claim takes a batch from the held shards and places its keyed events in
// their keys' chains, under mu. It returns a nil batch when nothing was
// claimed.
func (o *ownership) claim(ctx context.Context, lease store.Lease) (*batch, store.Claim, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.held) == 0 || time.Now().Before(o.pausedTill) {
		return nil, store.Claim{Lease: lease}, nil
	}
	shards := slices.Clone(o.held)
	claim, err := o.st.ClaimOwned(ctx, store.OwnedClaimRequest{
		ClaimRequest: store.ClaimRequest{
			Lease:        lease,
			Limit:        o.r.cfg.BatchSize,
			LeaseFor:     o.r.cfg.LeaseFor,
			HoldDeadKeys: o.r.cfg.DeadKeys == HoldKey,
		},
		Shards: shards,
	})
	if errors.Is(err, store.ErrLeaseLost) {
		// the store says this relay holds none of those shards any
		// more: its view is stale; heartbeat now rather than fail
		poke(o.kick)
		return nil, store.Claim{Lease: lease}, nil
	}
	if err != nil && !errors.Is(err, store.ErrNotMigrated) && !errors.Is(err, store.ErrNothingClaimed) {
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
	if err != nil || len(claim.Events) == 0 {
		return nil, claim, err
	}
	b := &batch{r: o.r, lease: lease, events: claim.Events, own: o}
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
	for _, l := range shards {
		b.shards = append(b.shards, l.Shard)
		o.busy[l.Shard]++
	}
	return b, claim, nil
}

// settled closes a batch's places in its keys' chains once its outcomes
// are written, and lets a drained revoked shard go. A key whose chain is
// empty is forgotten: its next claimed event goes without waiting, and the
// claim saw every outcome written (the claim runs under mu too).
func (o *ownership) settled(b *batch) {
	o.mu.Lock()
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
	drained := false
	for _, s := range b.shards {
		if o.busy[s]--; o.busy[s] <= 0 {
			delete(o.busy, s)
			drained = drained || slices.ContainsFunc(o.revoking, func(l store.ShardLease) bool { return l.Shard == s })
		}
	}
	o.mu.Unlock()
	if drained {
		poke(o.kick)
	}
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
func (o *ownership) update(own store.Ownership) (gained, lost []int) {
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
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-o.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// balance runs one Balance; leave gives everything up (the relay has
// settled all its work).
func (o *ownership) balance(ctx context.Context, leave bool) error {
	req := store.BalanceRequest{Owner: o.r.cfg.Owner, LeaseFor: o.r.cfg.LeaseFor, Leave: leave, HoldDeadKeys: o.r.cfg.DeadKeys == HoldKey}
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
		if !leave && len(o.drained()) > 0 {
			// Shards just marked Revoke are no longer claimed from, and
			// those with no batch in flight will not signal a drain:
			// release them now, not a heartbeat later, or nobody claims
			// their events meanwhile (the other relay waits for them).
			poke(o.kick)
		}
	}
	for _, h := range o.r.hooks.shards {
		h.OnShards(ctx, info)
	}
	return err
}

// deliverOwned publishes a batch of ownership mode: an event goes once the
// previous event of its key is confirmed, in this batch or in an earlier
// one still in flight (or, on a key-ordered broker, together with it in
// one call); when that event failed or was given back, it is given back
// too, untried. Events whose predecessors are confirmed go out together,
// in id order, one publish call per round.
func (b *batch) deliverOwned(ctx context.Context) (BatchReport, error) {
	rep := BatchReport{Lease: b.lease, Claimed: len(b.events)}
	pubCtx, end := b.begin(ctx)
	defer end()

	n := len(b.events)
	ordered := b.r.features.Ordering > 0 // OrderKey or OrderPartition
	// b.prevIn[i] is the index in this batch of the event i waits for, or
	// -1: then b.prev[i] is in an earlier batch, if any.
	wake := make(chan struct{}, 1)
	for i, p := range b.prev {
		if p != nil && b.prevIn[i] < 0 {
			p.notify(wake)
		}
	}
	const (
		waiting = iota
		sending
		confirmed
		failed
	)
	state := make([]int8, n)
	left := n
	giveBack := func(i int) {
		state[i] = failed
		left--
		b.released = append(b.released, b.events[i].ID)
		if t := b.tickets[i]; t != nil {
			t.resolve(false)
		}
	}
	failedKeys := make(map[string]bool)
	var brokerErr error
	b.acks = make([]int64, 0, n)
	var send []outbox.Event
	var idx []int
	mx := b.r.features.MaxInFlight
	for left > 0 {
		send, idx = send[:0], idx[:0]
		for i := range b.events {
			if state[i] != waiting {
				continue
			}
			ready, dead := false, false
			if j := b.prevIn[i]; j >= 0 {
				switch state[j] {
				case confirmed:
					ready = true
				case failed:
					dead = true
				case sending:
					ready = ordered // sent after it in the same call
				}
			} else if p := b.prev[i]; p != nil {
				done, ok := p.state()
				ready, dead = done && ok, done && !ok
			} else {
				ready = true
			}
			switch {
			case dead:
				giveBack(i)
			case ready && (mx <= 0 || len(send) < mx):
				state[i] = sending
				send = append(send, b.events[i])
				idx = append(idx, i)
			}
		}
		if left == 0 {
			break
		}
		if len(send) == 0 {
			// every event left waits for an earlier batch
			select {
			case <-wake:
				continue
			case <-ctx.Done():
			case <-pubCtx.Done():
			}
			for i := range b.events {
				if state[i] == waiting {
					giveBack(i)
				}
			}
			break
		}
		ok, stopped := b.publish(ctx, pubCtx, send, failedKeys, &brokerErr)
		if stopped {
			// stopping, the lease is gone, or the broker cannot be
			// reached: give back what was not sent
			for _, i := range idx {
				state[i] = waiting
			}
			for i := range b.events {
				if state[i] == waiting {
					giveBack(i)
				}
			}
			break
		}
		for k, i := range idx {
			left--
			if ok[k] {
				state[i] = confirmed
			} else {
				state[i] = failed
			}
			if t := b.tickets[i]; t != nil {
				t.resolve(ok[k])
			}
		}
	}
	b.brokerHealth(brokerErr)
	return rep, brokerErr
}
