package relay

import (
	"context"
	"errors"
	"sync"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/relay/internal/dispatch"
	"github.com/outbox-go/outbox/store/driver"
)

// batch is one claimed batch on its way through publish and settle.
type batch struct {
	r      *Relay
	lease  driver.Lease
	events []outbox.Event
	start  time.Time
	// bytes are the events' payload bytes, held in Relay.bytes until the
	// batch is settled; full: the claim took its BatchSize or most of the
	// bytes it was allowed, so more events are likely waiting.
	bytes int64
	full  bool

	mu        sync.Mutex
	leaseTill time.Time // local estimate of the lease's end
	// leaseMax bounds the store's end of the lease from above: LeaseFor
	// after the latest return of a claim or Extend that may have set it,
	// failed ones included (a renewal whose client gave up may still have
	// run in the database, later than the one that last succeeded).
	leaseMax time.Time
	lost     bool // the store said the lease is gone

	acks     []int64
	retries  []driver.Retry
	burials  []driver.Burial
	released []int64

	// The dispatcher; each event's predecessor of its key (nil: none, or keyless), and its index when it is in this
	// batch (else -1); each event's own ticket (nil when keyless); and the
	// shards claimed from.
	own     *ownership
	prev    []*ticket
	prevIn  []int
	tickets []*ticket
	shards  []int
}

func (b *batch) isLost() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lost
}

// dispatch publishes the batch through the per-key dispatcher (internal/dispatch): event i waits for event prevIn[i] of the
// batch, or (prevIn[i] < 0) for the ticket prev[i] of an earlier batch, if
// any; at most dispatch.DefaultMaxCalls calls are in flight. Each call's
// results are sorted into acks, retries, burials and releases (sort); the
// events released untried are the caller's to record, told through
// settled with every other outcome. No call starts once the relay is
// stopping, the lease is gone or the broker cannot be reached. It returns
// the broker's error, before brokerOutcome.
func (b *batch) dispatch(ctx, pubCtx context.Context, prevIn []int, prev []dispatch.Ticket, settled func(i int, o dispatch.Outcome)) error {
	var brokerErr error
	b.acks = make([]int64, 0, len(b.events))
	dispatch.Run(dispatch.Set{
		Events:   b.events,
		PrevIn:   prevIn,
		Prev:     prev,
		Features: b.r.features,
		Publish: func(send []outbox.Event) ([]broker.Result, bool) {
			results, stopped := b.r.publish(pubCtx, send)
			return results, !stopped
		},
		Judge: func(send []outbox.Event, results []broker.Result) []bool {
			return b.sort(pubCtx, send, results, &brokerErr)
		},
		Stop: func() bool { return b.mustStop(ctx, pubCtx, brokerErr) },
		Wait: func(wake <-chan struct{}) bool {
			select {
			case <-wake:
				return true
			case <-ctx.Done():
			case <-pubCtx.Done():
			}
			return false
		},
		Settled: settled,
	})
	return brokerErr
}

// begin starts a batch's publishing: the publish context outlives ctx by
// DrainTimeout so that a stop lets in-flight publishes finish, and ends
// early if the lease is lost; the lease is renewed until end is called.
func (b *batch) begin(ctx context.Context) (pubCtx context.Context, end func()) {
	pubCtx, cancelPub := context.WithCancel(context.Background())
	stopDrain := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(b.r.cfg.DrainTimeout, cancelPub)
		context.AfterFunc(pubCtx, func() { t.Stop() })
	})
	renewDone := make(chan struct{})
	renewCtx, stopRenew := context.WithCancel(context.Background())
	go func() {
		defer close(renewDone)
		b.renew(renewCtx, cancelPub)
	}()
	return pubCtx, func() {
		stopRenew()
		<-renewDone
		stopDrain()
		cancelPub()
	}
}

// brokerOutcome is the batch's broker error, for the worker's backoff and
// Health: a call that confirmed nothing sets it, but when another call of
// the same batch got events confirmed the broker did not fail as a whole
// (one full stream, one topic's timeout): those failures are the events'
// own retries, and the worker goes on without backing off. Only an
// unreachable broker (ErrUnavailable) counts whatever else was confirmed.
func (b *batch) brokerOutcome(brokerErr error) error {
	if brokerErr != nil && len(b.acks) > 0 && !errors.Is(brokerErr, broker.ErrUnavailable) {
		return nil
	}
	return brokerErr
}

// brokerHealth records the broker's state after a batch.
func (b *batch) brokerHealth(brokerErr error) {
	b.r.brokerHealth(brokerErr, len(b.acks))
}

// mustStop reports whether no further publish call may start: the relay
// is stopping, the lease is gone, or the broker could not be reached.
func (b *batch) mustStop(ctx, pubCtx context.Context, brokerErr error) bool {
	return ctx.Err() != nil || pubCtx.Err() != nil || b.isLost() || errors.Is(brokerErr, broker.ErrUnavailable)
}

// sort files one call's results, as judge decides them, into acks,
// retries, burials and releases; ok[i] says send[i] was confirmed.
// *brokerErr is set when the broker failed as a whole.
func (b *batch) sort(pubCtx context.Context, send []outbox.Event, results []broker.Result, brokerErr *error) (ok []bool) {
	j := b.r.judge(send, results, pubCtx.Err() != nil)
	ok = make([]bool, len(send))
	for i, e := range send {
		switch v := j.each[i]; v.verdict {
		case confirmed:
			b.acks = append(b.acks, e.ID)
			ok[i] = true
		case givenBack:
			b.released = append(b.released, e.ID)
		case dead:
			b.burials = append(b.burials, driver.Burial{ID: e.ID, Error: v.reason})
		case retried:
			b.retries = append(b.retries, driver.Retry{ID: e.ID, Delay: b.r.retryDelay(v.attempt, v.err), Error: v.err.Error()})
		}
	}
	if j.unavailable != nil && *brokerErr == nil {
		*brokerErr = j.unavailable
	}
	if j.failing != nil {
		*brokerErr = j.failing
	}
	return ok
}

// renew extends the lease every LeaseFor/3 until ctx ends. When the store
// says the lease is gone, or it could not be renewed before it ran out,
// publishing stops.
func (b *batch) renew(ctx context.Context, stopPublishing func()) {
	every := b.r.cfg.LeaseFor / 3
	t := time.NewTicker(every)
	defer t.Stop()
	all := ids(b.events)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !b.extend(ctx, all) {
			stopPublishing()
			return
		}
	}
}

// extend renews the lease once; false when it is lost.
func (b *batch) extend(ctx context.Context, all []int64) bool {
	before := time.Now()
	ectx, cancel := context.WithTimeout(ctx, b.r.cfg.LeaseFor/3)
	_, err := b.r.st.Extend(ectx, driver.ExtendParams{Lease: b.lease, IDs: all, For: b.r.cfg.LeaseFor})
	cancel()
	b.mu.Lock()
	// whatever it answered, it may have renewed some rows in the
	// database at any moment until now
	b.leaseMax = later(b.leaseMax, time.Now().Add(b.r.cfg.LeaseFor))
	switch {
	case err == nil:
		b.leaseTill = before.Add(b.r.cfg.LeaseFor)
	case errors.Is(err, driver.ErrLeaseLost):
		b.lost = true
	case time.Now().After(b.leaseTill):
		b.lost = true
	}
	info := LeaseInfo{Lease: b.lease, Lost: b.lost, Until: b.leaseTill, Err: err}
	b.mu.Unlock()
	for _, h := range b.r.hooks.lease {
		h.OnLease(ctx, info)
	}
	return !info.Lost
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// settle writes the outcomes: acks first (the broker has them), then retries,
// burials and releases. Each write is retried until the lease runs out; an
// outcome that cannot be written is not lost: the lease brings the event back.
func (b *batch) settle(rep *BatchReport) {
	cfg := b.r.cfg
	// Retry/Bury/Release need a live lease: renew it first if it is short.
	if len(b.retries)+len(b.burials)+len(b.released) > 0 && !b.isLost() {
		b.mu.Lock()
		short := time.Until(b.leaseTill) < cfg.LeaseFor/2
		b.mu.Unlock()
		if short {
			b.extend(context.Background(), ids(b.events))
		}
	}
	// write retries op until it succeeds, the lease is refused, or the
	// deadline passes. Acks need no live lease (the broker has the events;
	// only a takeover refuses them), so they get LeaseFor from now; the
	// other writes are refused once the lease ran out, so they stop there.
	write := func(n int, needLease bool, op func(ctx context.Context) error) bool {
		if n == 0 {
			return true
		}
		deadline := time.Now().Add(cfg.LeaseFor)
		for attempt := 1; ; attempt++ {
			if needLease {
				b.mu.Lock()
				deadline = b.leaseTill
				b.mu.Unlock()
			}
			ctx, cancel := context.WithTimeout(context.Background(), max(time.Until(deadline), cfg.LeaseFor/4))
			err := op(ctx)
			cancel()
			if err == nil {
				b.r.health.set(&b.r.health.store, nil)
				return true
			}
			if errors.Is(err, driver.ErrLeaseLost) {
				rep.LeaseLost = true
				return false
			}
			b.r.health.set(&b.r.health.store, err)
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(min(jitter(backoff(50*time.Millisecond, time.Second, attempt)), time.Until(deadline)))
		}
	}
	ackOp := func(ctx context.Context) error { return b.r.st.Ack(ctx, driver.AckParams{Lease: b.lease, IDs: b.acks}) }
	if len(b.acks) == len(b.events) {
		// every event was delivered: ack the claim as a whole
		ackOp = func(ctx context.Context) error {
			return b.r.st.AckClaim(ctx, driver.AckClaimParams{Lease: b.lease, N: len(b.events)})
		}
	}
	if write(len(b.acks), false, ackOp) {
		rep.Delivered = len(b.acks)
	}
	if b.isLost() {
		rep.LeaseLost = true
		return // the new owner decides; our retries/releases would be refused
	}
	if write(len(b.retries), true, func(ctx context.Context) error {
		return b.r.st.Retry(ctx, driver.RetryParams{Lease: b.lease, Retries: b.retries})
	}) {
		rep.Retried = len(b.retries)
	}
	if write(len(b.burials), true, func(ctx context.Context) error {
		return b.r.st.Bury(ctx, driver.BuryParams{Lease: b.lease, Burials: b.burials})
	}) {
		rep.Dead = len(b.burials)
		for _, d := range b.burials {
			b.r.cfg.Logger.Warn("relay: event is DEAD", "id", d.ID, "reason", d.Error)
		}
	}
	if write(len(b.released), true, func(ctx context.Context) error {
		return b.r.st.Release(ctx, driver.ReleaseParams{Lease: b.lease, IDs: b.released})
	}) {
		rep.Released = len(b.released)
	}
}
