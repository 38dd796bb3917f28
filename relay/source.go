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
	"github.com/outbox-go/outbox/relay/internal/dispatch"
	"github.com/outbox-go/outbox/source"
)

// maxPending bounds the events a relay reads from a source.Source and has
// not settled yet (memory): past it the relay reads no more until some
// settle.
const maxPending = 20_000

// NewSource returns a relay that delivers a source.Source's events (a log
// tail such as source/pgcdc) through br: the source's log loop (see the
// package doc). The relay's hooks, Health and Totals work as for a store:
// a Next is a claim (HookClaim), each publish call goes to
// HookPublishStart and HookPublishEnd, each call's outcomes to HookSettle
// (Released counts the events released untried), and the source's Bury
// and Ack failures set the store's health. There are no leases per batch
// (HookLease and HookShards are not called): a source fences itself.
// cfg's BatchSize, Workers (publish calls in flight), PublishTimeout,
// MaxAttempts, BackoffBase, BackoffMax, DrainTimeout, Logger and Hooks
// apply; Owner, LeaseFor and PollInterval belong to the source, and a
// source's DEAD event never holds its key (DeadKeys is ignored).
//
// Unlike a store's relay, Run returns the source's failure, such as
// source.ErrFenced when another process took the stream over.
func NewSource(src source.Source, br broker.Broker, cfg Config) (*Relay, error) {
	if src == nil || br == nil {
		return nil, errors.New("relay: NewSource needs a source and a broker")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Relay{br: br, cfg: cfg, src: src, wake: make(chan struct{}, 1)}
	r.bytes.max = cfg.MaxInflightBytes
	r.features = broker.FeaturesOf(br)
	if n := r.features.MaxInFlight; n > 0 {
		r.window = semaphore.NewWeighted(int64(n))
	}
	r.hooks = sortHooks(cfg.Hooks)
	r.health.log = cfg.Logger
	r.health.hooks = r.hooks.health
	r.health.store.name, r.health.broker.name = "store", "broker"
	return r, nil
}

type txnState struct {
	pos  source.Position
	left int // events not settled yet
}

// entry is one event read and not settled yet.
type entry struct {
	ev        outbox.Event
	txn       *txnState
	seq       uint64 // read order, so a key's events are in commit order
	attempts  int
	notBefore time.Time
	k         *keyChain // nil for a keyless event
	// latch is its outcome in the set it was handed to (nil while it is in
	// none): the ticket its key's next event in a later set waits for.
	latch   *dispatch.Latch
	pred    *entry // while a set is built: the event it waits for
	gen     uint64 // the set it was last handed to
	at      int    // its index in that set
	heapIdx int
}

// keyChain is one key's unsettled events in commit order, and how far they
// were handed to sets. items[:placed] went to sets still in flight, each
// waiting for the one before it (in its set, or through that one's latch);
// items[placed:] are in no set. While no outcome but confirmed or DEAD
// comes back, the key's next events join later sets behind
// items[placed-1]. Once one comes back unsettled (failed, held back, given
// back), none is handed out until every outcome is back; then the key is
// handed out again from its first event.
type keyChain struct {
	key    string
	items  []*entry
	placed int
	out    int  // handed to sets, outcome not back yet
	broken bool // one of those came back unsettled
	dirty  bool // in logRun.dirty
}

// report is what a set tells the log loop: one publish call's results, an
// event released untried, or that the set is done.
type report struct {
	call    *call
	back    *entry
	setDone bool
}

type call struct {
	entries  []*entry
	events   []outbox.Event
	results  []broker.Result
	took     time.Duration
	cutShort bool // the publish's context had ended when it returned
}

// reports carries the sets' reports to the log loop's goroutine, in the
// order they were pushed.
type reports struct {
	mu    sync.Mutex
	list  []report
	spare []report
	wake  chan struct{}
}

func (b *reports) push(r report) {
	b.mu.Lock()
	b.list = append(b.list, r)
	b.mu.Unlock()
	poke(b.wake)
}

// take returns the reports pushed so far; they are valid until the next take.
func (b *reports) take() []report {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.spare)
	out := b.list
	b.list, b.spare = b.spare[:0], out
	return out
}

type ackReq struct {
	burials []source.Burial
	pos     source.Position
}

type ackDone struct {
	req ackReq
	err error
}

// logRun is the log loop's state, owned by runSource's goroutine, except
// where said.
type logRun struct {
	r *Relay
	// For the sets' goroutines: ctx ends when the loop stops (no further
	// publish call starts); pub is the publish calls' base (it outlives
	// the caller's context by DrainTimeout); slots holds one token per
	// publish call in flight; paused is pauseUntil (UnixNano).
	ctx     context.Context
	pub     context.Context
	slots   chan struct{}
	reports reports
	paused  atomic.Int64

	keys    map[string]*keyChain
	dirty   []*keyChain // keys that may have events to hand out
	loose   []*entry    // keyless events due
	delayed delayHeap
	txns    []*txnState
	seq     uint64
	gen     uint64
	live    int // unsettled events
	sets    int // sets in flight

	pauseUntil  time.Time // the broker was unavailable
	unavailable int       // consecutive unavailable calls

	burials   []source.Burial // decided, not yet written
	ackWanted source.Position // highest fully settled position
	ackSent   source.Position
	ackBusy   bool
	ackRetry  time.Time
}

// runSource is Run for a relay made by NewSource: it delivers until ctx
// ends (then it returns nil after settling what is in flight, within
// DrainTimeout) or the source fails (source.ErrFenced, or an error it
// cannot recover from).
func (r *Relay) runSource(ctx context.Context) error {
	cfg := r.cfg
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	l := &logRun{r: r, ctx: runCtx, keys: map[string]*keyChain{}, slots: make(chan struct{}, cfg.Workers)}
	l.reports.wake = make(chan struct{}, 1)

	readCtx, stopRead := context.WithCancel(ctx)
	defer stopRead()
	in := make(chan []source.Txn)
	readErr := make(chan error, 1)
	go func() {
		for {
			start := time.Now()
			txns, err := r.src.Next(readCtx)
			if err == nil || readCtx.Err() == nil {
				r.sourceRead(readCtx, txns, time.Since(start), err)
			}
			if err != nil {
				readErr <- err
				return
			}
			select {
			case in <- txns:
			case <-readCtx.Done():
				readErr <- readCtx.Err()
				return
			}
		}
	}()

	// Publishes outlive ctx by DrainTimeout so that a stop lets them finish.
	pubBase, cancelPub := context.WithCancel(context.Background())
	defer cancelPub()
	stopDrain := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(cfg.DrainTimeout, cancelPub)
		context.AfterFunc(pubBase, func() { t.Stop() })
	})
	defer stopDrain()
	l.pub = pubBase

	acks := make(chan ackReq, 1)
	acked := make(chan ackDone, 1)
	ackCtx, stopAck := context.WithCancel(context.Background())
	defer stopAck()
	go func() {
		for req := range acks {
			actx, cancel := context.WithTimeout(ackCtx, 30*time.Second)
			var err error
			if len(req.burials) > 0 {
				err = r.src.Bury(actx, req.burials)
			}
			if err == nil && req.pos > 0 {
				err = r.src.Ack(actx, req.pos)
			}
			cancel()
			r.sourceAcked(err)
			acked <- ackDone{req, err}
		}
	}()
	defer close(acks)

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var failure error
	stopping := false
	readDone := false
	stop := func() {
		stopping = true
		stopRun()
	}
	for {
		now := time.Now()
		l.promote(now)
		// A new set starts when a publish call could start now: while
		// every call is busy, what gets ready gathers into the next set.
		if !stopping && !now.Before(l.pauseUntil) && (l.sets == 0 || len(l.slots) < cfg.Workers) {
			l.launch(now)
		}
		if !l.ackBusy && !now.Before(l.ackRetry) && (len(l.burials) > 0 || l.ackWanted > l.ackSent) {
			req := ackReq{burials: l.burials, pos: l.ackWanted}
			l.burials = nil
			l.ackBusy = true
			acks <- req
		}
		if stopping && l.sets == 0 && !l.ackBusy {
			// nothing left to acknowledge, or the final ack failed (the
			// source replays what it did not acknowledge)
			if len(l.burials) == 0 && l.ackWanted <= l.ackSent || now.Before(l.ackRetry) {
				return failure
			}
		}
		timer.Reset(l.wakeAt(now))
		// Read no more while the events held weigh MaxInflightBytes (a
		// settle wakes the loop); the read already under way still
		// comes in, on top of the budget.
		var input chan []source.Txn
		if left, _ := r.bytes.room(); !stopping && !readDone && l.live < maxPending && left > 0 {
			input = in
		}
		var done <-chan struct{}
		if !stopping {
			done = ctx.Done()
		}
		select {
		case txns := <-input:
			l.add(txns)
		case err := <-readErr:
			readDone = true
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				failure = fmt.Errorf("relay: reading the source: %w", err)
				cfg.Logger.Error("relay: the source failed; stopping", "error", err.Error())
				stop()
			}
		case <-l.reports.wake:
			l.settle(time.Now())
		case d := <-acked:
			l.ackBusy = false
			if d.err != nil {
				l.burials = append(d.req.burials, l.burials...)
				if errors.Is(d.err, source.ErrFenced) {
					failure = d.err
					stop()
					l.burials, l.ackWanted = nil, l.ackSent // fenced: write nothing more
					continue
				}
				cfg.Logger.Warn("relay: acknowledging to the source failed; will retry", "error", d.err.Error())
				l.ackRetry = time.Now().Add(time.Second)
				continue
			}
			if d.req.pos > l.ackSent {
				l.ackSent = d.req.pos
			}
		case <-done:
			stop()
			stopRead()
		case <-timer.C:
		}
	}
}

// sourceRead tells the claim hooks, health and counters about a Next.
func (r *Relay) sourceRead(ctx context.Context, txns []source.Txn, took time.Duration, err error) {
	var evs []outbox.Event
	for _, t := range txns {
		evs = append(evs, t.Events...)
	}
	for _, h := range r.hooks.claim {
		h.OnClaim(ctx, ClaimInfo{Events: evs, Took: took, Err: err})
	}
	if err != nil {
		if !errors.Is(err, source.ErrFenced) {
			r.health.set(&r.health.store, fmt.Errorf("reading the source: %w", err))
		}
		return
	}
	r.health.set(&r.health.store, nil)
	stamp(&r.lastClaim)
	r.totals.Claimed.Add(int64(len(evs)))
	r.inFlight.Add(int64(len(evs)))
}

// sourceAcked records the outcome of a Bury-and-Ack round in the store's
// health (fencing is no failure of the store: Run returns it).
func (r *Relay) sourceAcked(err error) {
	if errors.Is(err, source.ErrFenced) {
		return
	}
	if err != nil {
		err = fmt.Errorf("acknowledging to the source: %w", err)
	}
	r.health.set(&r.health.store, err)
}

// add takes in newly committed transactions.
func (l *logRun) add(txns []source.Txn) {
	now := time.Now()
	for _, t := range txns {
		ts := &txnState{pos: t.Pos, left: len(t.Events)}
		l.txns = append(l.txns, ts)
		for i := range t.Events {
			// a delayed event (Message.AvailableAt) waits, and holds its key
			l.seq++
			e := &entry{ev: t.Events[i], txn: ts, seq: l.seq, attempts: t.Events[i].Attempts, heapIdx: -1, notBefore: t.Events[i].AvailableAt}
			l.live++
			l.r.bytes.take(int64(len(e.ev.Payload)))
			if e.ev.Key == "" {
				l.enqueue(e, now)
				continue
			}
			k := l.keys[e.ev.Key]
			if k == nil {
				k = &keyChain{key: e.ev.Key}
				l.keys[e.ev.Key] = k
			}
			e.k = k
			k.items = append(k.items, e)
			l.markDirty(k)
		}
	}
	l.advance()
}

// advance moves ackWanted past the leading fully settled transactions.
func (l *logRun) advance() {
	n := 0
	for n < len(l.txns) && l.txns[n].left == 0 {
		if p := l.txns[n].pos; p > l.ackWanted {
			l.ackWanted = p
		}
		n++
	}
	if n > 0 {
		clear(l.txns[:n])
		l.txns = l.txns[n:]
	}
}
