package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/relay/internal/retry"
	"github.com/outbox-go/outbox/source"
	"github.com/outbox-go/outbox/store/driver"
)

// Relay delivers a store's events through a broker. Create it with New and
// run it with Run.
type Relay struct {
	st  driver.Driver
	br  broker.Broker
	cfg Config

	epoch atomic.Int64

	// wake holds at most one token: a wake-up sends one idle worker to
	// claim (not all of them, which would mostly claim nothing); a worker
	// that claims a full batch passes a token on, so a backlog enlists
	// every worker.
	wake chan struct{}
	// watched: the store's Notify wakes the relay after every commit
	// (driver.Watcher), so a worker does not look again after events
	watched bool

	health health
	totals Totals
	hooks  hooks

	// features are the broker's, read once; window bounds the events in
	// flight across workers when the broker declares MaxInFlight.
	features broker.Features
	window   *semaphore.Weighted

	// lastClaim and lastDelivered are Unix nanoseconds (0: never);
	// inFlight counts claimed events not yet settled (see Health).
	lastClaim, lastDelivered, inFlight atomic.Int64

	// bytes counts the payload bytes held against MaxInflightBytes.
	bytes budget

	// own holds the shard leases and orders the claims.
	own *ownership

	// src is set when the relay reads a source.Source (NewSource).
	src source.Source
}

// Totals are cumulative counts since the relay started.
type Totals struct {
	Claimed, Delivered, Retried, Dead, Released, Batches atomic.Int64
}

// New checks cfg and returns a relay over st, a store's driver (every
// store of this module is one: pass the *pgstore.Store, *mysqlstore.Store
// or *sqlitestore.Store itself). It does not touch the store or broker.
func New(st driver.Driver, br broker.Broker, cfg Config) (*Relay, error) {
	if st == nil || br == nil {
		return nil, errors.New("relay: New needs a store and a broker")
	}
	named := cfg.Owner != ""
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if named {
		cfg.Owner = incarnation(cfg.Owner)
	}
	r := &Relay{st: st, br: br, cfg: cfg, wake: make(chan struct{}, 1)}
	r.bytes.max = cfg.MaxInflightBytes
	// Epochs start from the clock, so a relay restarted under the same
	// Owner never reuses an epoch of its earlier life.
	r.epoch.Store(time.Now().UnixMicro())
	r.features = broker.FeaturesOf(br)
	if n := r.features.MaxInFlight; n > 0 {
		r.window = semaphore.NewWeighted(int64(n))
	}
	r.hooks = sortHooks(cfg.Hooks)
	r.health.log = cfg.Logger
	r.health.hooks = r.hooks.health
	r.health.store.name, r.health.broker.name = "store", "broker"
	r.own = newOwnership(r, st)
	return r, nil
}

// Owner returns the name this relay uses in leases.
func (r *Relay) Owner() string { return r.cfg.Owner }

// Totals returns the relay's cumulative counters.
func (r *Relay) Totals() *Totals { return &r.totals }

// Wake makes an idle worker look for work now (or the next worker to go
// idle, if none is). Call it after committing events in the same process
// when the store has no Notifier of its own.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// Run delivers events until ctx ends, then stops claiming, lets in-flight
// publishes finish for up to DrainTimeout, settles what it can and releases
// the rest. It returns nil after a graceful stop; errors on the way are
// retried and logged, never returned.
func (r *Relay) Run(ctx context.Context) error {
	if r.src != nil {
		return r.runSource(ctx)
	}
	if n, ok := r.st.(driver.Notifier); ok {
		w, ok := n.(driver.Watcher)
		r.watched = ok && w.Watching()
		nctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch := n.Notify(nctx)
		go func() {
			for {
				select {
				case <-nctx.Done():
					return
				case <-ch:
					r.Wake()
				}
			}
		}()
	}
	bctx, stopBalance := context.WithCancel(ctx)
	defer stopBalance()
	balanced := make(chan struct{})
	go func() {
		defer close(balanced)
		r.own.balanceLoop(bctx)
	}()
	var wg sync.WaitGroup
	for i := 0; i < r.cfg.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.work(ctx)
		}()
	}
	wg.Wait()
	// Every batch is settled: give the shards up at once, so the other
	// relays take them without waiting for the leases to run out.
	stopBalance()
	<-balanced
	if err := r.own.balance(ctx, true); err != nil {
		r.cfg.Logger.Warn("relay: could not give up the shards; the other relays take them when the lease runs out", "error", err.Error())
	}
	return nil
}

// work is one claim → publish → settle loop.
func (r *Relay) work(ctx context.Context) {
	failures := 0 // consecutive rounds that failed as a whole
	quiet := 0    // consecutive empty rounds since the last events
	var settling chan struct{}
	defer func() {
		if settling != nil {
			<-settling
		}
	}()
	for ctx.Err() == nil {
		n, full, err := r.round(ctx, &settling)
		if ctx.Err() != nil {
			return
		}
		var wait time.Duration
		switch {
		case err == errBudgetFull:
			// The events held weigh the whole budget: claim again once
			// a settle gives some back (not a round, nor a failure).
			if _, freed := r.bytes.room(); freed != nil {
				select {
				case <-ctx.Done():
				case <-freed:
				}
			}
			continue
		case err == errClaimQueued || err == errClaimPaused:
			// Not a round: the claim waiting to start takes what this
			// one would have, or claims wait for a failed one's lease
			// to run out. Neither a failure nor an empty round; a
			// wake-up or the poll brings this worker back.
			wait, err = r.cfg.PollInterval, nil
		case err != nil:
			failures++
			wait = jitter(backoff(r.cfg.BackoffBase/4, 30*time.Second, failures))
		case full:
			failures, quiet = 0, 0
			r.Wake() // more work is likely waiting: bring a peer in too
			continue
		default:
			failures = 0
			if n > 0 {
				quiet = 0
			}
			wait = r.cfg.PollInterval
			if quiet < len(recheck) && !r.watched {
				// Look again soon after events arrived: wake-ups are
				// coalesced (one notification may stand for several
				// commits), and a commit that landed just after this
				// claim read the table has no notification of its own.
				// A store that watches every commit (driver.Watcher)
				// wakes the relay for those itself: there, these looks
				// were claims that mostly found nothing, and each one
				// in flight held back the claim that would have.
				wait = min(wait, recheck[quiet])
			}
			quiet++
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-r.wake:
			if err != nil {
				// a wake-up does not cut an error backoff short; pass
				// it on to a worker that is not backing off
				r.Wake()
				select {
				case <-ctx.Done():
				case <-t.C:
				}
			}
		}
		t.Stop()
	}
}

// recheck are the waits before the empty rounds that follow a round with
// events, before the relay settles into PollInterval. They cover commits
// up to about 60 ms behind the wake-up that brought the relay.
var recheck = [...]time.Duration{2 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond}

// round claims one batch and publishes it, and leaves its settling (the
// ack, retries, burials and releases) to a goroutine, so that the worker
// claims and publishes its next batch meanwhile. Settles of one worker run
// in order, one at a time: *settling is closed when the latest is done, and
// a worker holds at most two batches (Config.BatchSize says so). The next claim cannot take a key or
// event of the batch being settled: its claim is still live. It returns how
// many events were claimed, whether the claim was full or only buried
// rows (more are likely waiting: see ownership.claim), and an error when
// the store or the broker failed as a whole.
func (r *Relay) round(ctx context.Context, settling *chan struct{}) (int, bool, error) {
	lease := driver.Lease{Owner: r.cfg.Owner, Epoch: r.epoch.Add(1)}
	start := time.Now()
	// The claim is not cancelled by a stop: a claim that committed while
	// the client gave up would hold its events until the lease ran out.
	// deliver releases at once what a stopping relay claimed.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(r.cfg.LeaseFor/2, 5*time.Second))
	defer cancel()
	b, claim, err := r.own.claim(cctx, lease)
	if err == errClaimQueued || err == errClaimPaused || err == errBudgetFull {
		return 0, false, err // not a claim: no hooks, no health change
	}
	for _, h := range r.hooks.claim {
		h.OnClaim(ctx, ClaimInfo{Lease: lease, Events: claim.Events, Took: time.Since(start), Err: err})
	}
	if err != nil {
		r.health.set(&r.health.store, fmt.Errorf("claim: %w", err))
		return 0, false, err
	}
	r.health.set(&r.health.store, nil)
	stamp(&r.lastClaim)
	if len(claim.Buried) > 0 {
		r.buriedAtClaim(ctx, lease, start, claim.Buried)
	}
	if len(claim.Events) == 0 {
		// A claim that only buried rows stopped there (the store returns
		// its burials before it would claim again past held rows): more
		// are likely waiting.
		return 0, len(claim.Buried) > 0, nil
	}
	r.inFlight.Add(int64(len(claim.Events)))
	b.start, b.leaseTill, b.leaseMax = start, start.Add(r.cfg.LeaseFor), time.Now().Add(r.cfg.LeaseFor)
	rep, brokerDown := b.deliver(ctx)
	// The previous batch's settle must be done before this one's starts
	// (it usually is, long since): settles stay in order, and a worker
	// never holds more than this batch and the one it claims next.
	if *settling != nil {
		<-*settling
	}
	done := make(chan struct{})
	*settling = done
	go func() {
		defer close(done)
		b.settle(&rep)
		if rep.Delivered == len(b.acks) && rep.Retried == len(b.retries) && rep.Dead == len(b.burials) && rep.Released == len(b.released) {
			b.own.settled(b)
		} else {
			// An outcome could not be written: the event may still
			// be leased to this relay in the store, and the claim
			// does not let a relay's own claims hold its keys. Keep
			// the batch's keys waiting until that lease has surely
			// run out: LeaseFor after the last claim or Extend that
			// may have set it returned (a renewal that failed on the
			// client may have run in the database, so the estimate
			// of the last successful one is not a bound), plus the
			// margin a failed claim pauses for, for a statement that
			// outlived its client; the next claim then takes the
			// event over before the key's later ones.
			b.mu.Lock()
			wait := time.Until(b.leaseMax) + r.cfg.LeaseFor/3
			b.mu.Unlock()
			time.AfterFunc(max(wait, 0), func() { b.own.settled(b) })
		}
		r.inFlight.Add(-int64(len(b.events)))
		r.bytes.give(b.bytes)
		if rep.Delivered > 0 {
			stamp(&r.lastDelivered)
		}
		rep.Duration = time.Since(start)
		r.totals.Batches.Add(1)
		r.totals.Claimed.Add(int64(rep.Claimed))
		r.totals.Delivered.Add(int64(rep.Delivered))
		r.totals.Retried.Add(int64(rep.Retried))
		r.totals.Dead.Add(int64(rep.Dead))
		r.totals.Released.Add(int64(rep.Released))
		for _, h := range r.hooks.settle {
			h.OnSettle(context.WithoutCancel(ctx), rep)
		}
	}()
	if brokerDown != nil {
		return len(claim.Events), b.full, brokerDown
	}
	return len(claim.Events), b.full, nil
}

// backoff is min(max, base·2^(attempt-1)) without overflow.
func backoff(base, max time.Duration, attempt int) time.Duration {
	return retry.Backoff(base, max, attempt)
}

// jitter returns a random duration in [0, d] (full jitter).
func jitter(d time.Duration) time.Duration { return retry.Jitter(d) }

// ids returns the ids of events.
func ids(events []outbox.Event) []int64 {
	out := make([]int64, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}

// inFlightWindow waits until n more events may be in flight at the broker
// (Features.MaxInFlight, shared by all workers; the dispatcher cuts calls
// to fit it) and returns the function that gives them back.
// It reports stopped when ctx ended first: the call is then not published.
func (r *Relay) inFlightWindow(ctx context.Context, n int) (release func(), stopped bool) {
	if r.window == nil {
		return func() {}, false
	}
	w := int64(min(n, r.features.MaxInFlight))
	if err := r.window.Acquire(ctx, w); err != nil {
		return nil, true
	}
	return func() { r.window.Release(w) }, false
}

// buriedAtClaim logs and counts the events the claim marked DEAD itself,
// because their rows break the table contract, as the relay's own burials
// are: a warning each, Totals.Dead, and a report to the settle hooks.
func (r *Relay) buriedAtClaim(ctx context.Context, lease driver.Lease, start time.Time, buried []driver.Burial) {
	for _, d := range buried {
		r.cfg.Logger.Warn("relay: event is DEAD", "id", d.ID, "reason", d.Error)
	}
	n := len(buried)
	r.totals.Claimed.Add(int64(n))
	r.totals.Dead.Add(int64(n))
	rep := BatchReport{Lease: lease, Claimed: n, Dead: n, Duration: time.Since(start)}
	for _, h := range r.hooks.settle {
		h.OnSettle(context.WithoutCancel(ctx), rep)
	}
}
