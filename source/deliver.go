package source

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/internal/dispatch"
	"github.com/outbox-go/outbox/internal/retry"
)

// Config tunes a Loop. Zero values take the documented defaults; negative
// ones are refused.
type Config struct {
	// BatchSize is the most events in one publish call; default 500.
	BatchSize int
	// InFlight is how many publish calls may be in flight at once; default 3.
	InFlight int
	// MaxPending bounds the events read from the source and not yet
	// settled (memory); default 20,000.
	MaxPending int
	// PublishTimeout bounds each publish call; default 10s.
	PublishTimeout time.Duration
	// MaxAttempts is how many failed attempts park an event as DEAD;
	// default 25.
	MaxAttempts int
	// BackoffBase and BackoffMax shape the retry delay: a random duration
	// in [0, min(BackoffMax, BackoffBase·2^(attempt-1))] (full jitter).
	// Defaults 1s and 10m.
	BackoffBase, BackoffMax time.Duration
	// DrainTimeout bounds how long Run waits for in-flight publishes after
	// its context ends; default 5s. What is not settled then is replayed by
	// the source after a restart.
	DrainTimeout time.Duration
	// OnDelivered, when set, is called for each event the broker confirmed,
	// from the loop's goroutine (keep it short): for metrics and tests.
	OnDelivered func(outbox.Event, broker.Result)
	// Observer, when set, is told what the loop does (the relay's hooks,
	// health and counters attach here: relay.NewSource).
	Observer *Observer
	// Logger receives state changes; default slog.Default().
	Logger *slog.Logger
}

// Observer is told what a Loop does. Every field is optional; each is
// called from the loop's own goroutines, several at once, and must be
// quick and must not keep the slices it is shown.
type Observer struct {
	// Read is told about every Next: the transactions it returned and how
	// long it took, or its error.
	Read func(ctx context.Context, txns []Txn, took time.Duration, err error)
	// PublishStart is told before each publish call and returns the
	// context the call runs under (it must derive from ctx; nil keeps ctx).
	PublishStart func(ctx context.Context, events []outbox.Event) context.Context
	// PublishEnd is told each publish call's outcome, one result per event.
	PublishEnd func(ctx context.Context, events []outbox.Event, results []broker.Result, took time.Duration)
	// Settled is told how each publish call's events were settled, and
	// how many events were given back without a call (Took 0, Held alone).
	Settled func(ctx context.Context, s Settled)
	// Acked is told the outcome of each Park-and-Ack round.
	Acked func(ctx context.Context, pos Position, parked int, err error)
}

// Settled counts one publish call's outcomes, or the events given back
// untried without one.
type Settled struct {
	Events    int           // in the call (or given back untried, with no call: Held alone)
	Delivered int           // confirmed by the broker
	Retried   int           // failed; will be tried again
	Dead      int           // parked
	Held      int           // not attempted: behind a failed event of their key, or the broker was unreachable
	Took      time.Duration // the publish call
}

// WithDefaults fills the defaults and validates c.
func (c Config) WithDefaults() (Config, error) {
	for _, f := range []struct {
		name string
		neg  bool
	}{
		{"BatchSize", c.BatchSize < 0}, {"InFlight", c.InFlight < 0}, {"MaxPending", c.MaxPending < 0},
		{"PublishTimeout", c.PublishTimeout < 0}, {"MaxAttempts", c.MaxAttempts < 0},
		{"BackoffBase", c.BackoffBase < 0}, {"BackoffMax", c.BackoffMax < 0}, {"DrainTimeout", c.DrainTimeout < 0},
	} {
		if f.neg {
			return c, fmt.Errorf("source: %s must not be negative (0 means the default)", f.name)
		}
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.BatchSize, 500)
	def(&c.InFlight, 3)
	def(&c.MaxPending, 20_000)
	def(&c.MaxAttempts, 25)
	defD(&c.PublishTimeout, 10*time.Second)
	defD(&c.BackoffBase, time.Second)
	defD(&c.BackoffMax, 10*time.Minute)
	defD(&c.DrainTimeout, 5*time.Second)
	if c.BackoffMax < c.BackoffBase {
		return c, errors.New("source: BackoffMax must not be below BackoffBase")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Totals counts what a Loop did.
type Totals struct {
	Delivered int64 // confirmed by the broker
	Retried   int64 // failed attempts that will be retried
	Dead      int64 // parked
	Acked     Position
}

// Loop delivers a Source's events through a broker (see the package doc).
type Loop struct {
	src      Source
	b        broker.Broker
	cfg      Config
	ordering broker.Ordering

	delivered, retried, dead atomic.Int64
	acked                    atomic.Uint64
}

// New returns a Loop; cfg is validated.
func New(src Source, b broker.Broker, cfg Config) (*Loop, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	if src == nil || b == nil {
		return nil, errors.New("source: New needs a Source and a Broker")
	}
	return &Loop{src: src, b: b, cfg: cfg, ordering: broker.FeaturesOf(b).Ordering}, nil
}

// Totals returns the counts so far.
func (l *Loop) Totals() Totals {
	return Totals{Delivered: l.delivered.Load(), Retried: l.retried.Load(), Dead: l.dead.Load(), Acked: Position(l.acked.Load())}
}

type txnState struct {
	pos  Position
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
	dirty  bool // in run.dirty
}

// report is what a set tells the loop: one publish call's results, an
// event given back untried, or that the set is done.
type report struct {
	call    *call
	back    *entry
	setDone bool
}

type call struct {
	entries []*entry
	events  []outbox.Event
	results []broker.Result
	took    time.Duration
}

// inbox carries the sets' reports to the loop's goroutine, in the order
// they were pushed.
type inbox struct {
	mu    sync.Mutex
	list  []report
	spare []report
	wake  chan struct{}
}

func (b *inbox) push(r report) {
	b.mu.Lock()
	b.list = append(b.list, r)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// take returns the reports pushed so far; they are valid until the next take.
func (b *inbox) take() []report {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.spare)
	out := b.list
	b.list, b.spare = b.spare[:0], out
	return out
}

type ackReq struct {
	parks []Parked
	pos   Position
}

type ackDone struct {
	req ackReq
	err error
}

// run is the loop's state, owned by Run's goroutine, except where said.
type run struct {
	l *Loop
	// For the sets' goroutines: ctx ends when the loop stops (no further
	// publish call starts); pub is the publish calls' base (it outlives
	// the caller's context by DrainTimeout); slots holds one token per
	// publish call in flight; paused is pauseUntil (UnixNano).
	ctx    context.Context
	pub    context.Context
	slots  chan struct{}
	inbox  inbox
	paused atomic.Int64

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

	parks     []Parked // decided, not yet written
	ackWanted Position // highest fully settled position
	ackSent   Position
	ackBusy   bool
	ackRetry  time.Time
}

// Run delivers until ctx ends (then it returns nil after settling what is
// in flight, within DrainTimeout) or the source fails (ErrFenced, or an
// error it cannot recover from).
func (l *Loop) Run(ctx context.Context) error {
	cfg := l.cfg
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	r := &run{l: l, ctx: runCtx, keys: map[string]*keyChain{}, slots: make(chan struct{}, cfg.InFlight)}
	r.inbox.wake = make(chan struct{}, 1)

	readCtx, stopRead := context.WithCancel(ctx)
	defer stopRead()
	in := make(chan []Txn)
	readErr := make(chan error, 1)
	go func() {
		for {
			start := time.Now()
			txns, err := l.src.Next(readCtx)
			if o := l.cfg.Observer; o != nil && o.Read != nil && (err == nil || readCtx.Err() == nil) {
				o.Read(readCtx, txns, time.Since(start), err)
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
	r.pub = pubBase

	acks := make(chan ackReq, 1)
	acked := make(chan ackDone, 1)
	ackCtx, stopAck := context.WithCancel(context.Background())
	defer stopAck()
	go func() {
		for req := range acks {
			actx, cancel := context.WithTimeout(ackCtx, 30*time.Second)
			var err error
			if len(req.parks) > 0 {
				err = l.src.Park(actx, req.parks)
			}
			if err == nil && req.pos > 0 {
				err = l.src.Ack(actx, req.pos)
			}
			cancel()
			if o := l.cfg.Observer; o != nil && o.Acked != nil {
				o.Acked(ackCtx, req.pos, len(req.parks), err)
			}
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
		r.promote(now)
		// A new set starts when a publish call could start now: while
		// every call is busy, what gets ready gathers into the next set.
		if !stopping && !now.Before(r.pauseUntil) && (r.sets == 0 || len(r.slots) < cfg.InFlight) {
			r.launch(now)
		}
		if !r.ackBusy && !now.Before(r.ackRetry) && (len(r.parks) > 0 || r.ackWanted > r.ackSent) {
			req := ackReq{parks: r.parks, pos: r.ackWanted}
			r.parks = nil
			r.ackBusy = true
			acks <- req
		}
		if stopping && r.sets == 0 && !r.ackBusy {
			// nothing left to acknowledge, or the final ack failed (the
			// source replays what it did not acknowledge)
			if len(r.parks) == 0 && r.ackWanted <= r.ackSent || now.Before(r.ackRetry) {
				return failure
			}
		}
		timer.Reset(r.wakeAt(now))
		var input chan []Txn
		if !stopping && !readDone && r.live < cfg.MaxPending {
			input = in
		}
		var done <-chan struct{}
		if !stopping {
			done = ctx.Done()
		}
		select {
		case txns := <-input:
			r.add(txns)
		case err := <-readErr:
			readDone = true
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				failure = fmt.Errorf("source: reading events: %w", err)
				cfg.Logger.Error("outbox cdc: the source failed; stopping", "error", err.Error())
				stop()
			}
		case <-r.inbox.wake:
			r.settle(time.Now())
		case d := <-acked:
			r.ackBusy = false
			if d.err != nil {
				r.parks = append(d.req.parks, r.parks...)
				if errors.Is(d.err, ErrFenced) {
					failure = d.err
					stop()
					r.parks, r.ackWanted = nil, r.ackSent // fenced: write nothing more
					continue
				}
				cfg.Logger.Warn("outbox cdc: acknowledging failed; will retry", "error", d.err.Error())
				r.ackRetry = time.Now().Add(time.Second)
				continue
			}
			if d.req.pos > r.ackSent {
				r.ackSent = d.req.pos
				l.acked.Store(uint64(d.req.pos))
			}
		case <-done:
			stop()
			stopRead()
		case <-timer.C:
		}
	}
}

// add takes in newly committed transactions.
func (r *run) add(txns []Txn) {
	now := time.Now()
	for _, t := range txns {
		ts := &txnState{pos: t.Pos, left: len(t.Events)}
		r.txns = append(r.txns, ts)
		for i := range t.Events {
			// a delayed event (Message.AvailableAt) waits, and holds its key
			r.seq++
			e := &entry{ev: t.Events[i], txn: ts, seq: r.seq, attempts: t.Events[i].Attempts, heapIdx: -1, notBefore: t.Events[i].AvailableAt}
			r.live++
			if e.ev.Key == "" {
				r.enqueue(e, now)
				continue
			}
			k := r.keys[e.ev.Key]
			if k == nil {
				k = &keyChain{key: e.ev.Key}
				r.keys[e.ev.Key] = k
			}
			e.k = k
			k.items = append(k.items, e)
			r.markDirty(k)
		}
	}
	r.advance()
}

// enqueue makes a keyless event due, or delayed until its notBefore.
func (r *run) enqueue(e *entry, now time.Time) {
	if e.notBefore.After(now) {
		heap.Push(&r.delayed, e)
		return
	}
	r.loose = append(r.loose, e)
}

func (r *run) markDirty(k *keyChain) {
	if !k.dirty {
		k.dirty = true
		r.dirty = append(r.dirty, k)
	}
}

// launch hands every event that may go now to a new set, which
// internal/dispatch publishes on its own goroutine.
func (r *run) launch(now time.Time) {
	r.gen++
	var es []*entry
	for _, k := range r.dirty {
		k.dirty = false
		es = r.handOut(k, now, es)
	}
	clear(r.dirty)
	r.dirty = r.dirty[:0]
	for _, e := range r.loose {
		e.latch, e.gen = &dispatch.Latch{}, r.gen
		es = append(es, e)
	}
	clear(r.loose)
	r.loose = r.loose[:0]
	if len(es) == 0 {
		return
	}
	// oldest first: the dispatcher sends ready events in index order
	slices.SortFunc(es, func(a, b *entry) int { return cmp.Compare(a.seq, b.seq) })
	n := len(es)
	evs := make([]outbox.Event, n)
	latches := make([]*dispatch.Latch, n)
	prevIn := make([]int, n)
	var prev []dispatch.Ticket
	for i, e := range es {
		e.at = i
		evs[i] = e.ev
		evs[i].Attempts = e.attempts
		latches[i] = e.latch
		prevIn[i] = -1
		switch p := e.pred; {
		case p == nil:
		case p.gen == r.gen:
			prevIn[i] = p.at
		default:
			// in an earlier set, still in flight: wait for its outcome
			if prev == nil {
				prev = make([]dispatch.Ticket, n)
			}
			prev[i] = p.latch
		}
		e.pred = nil
	}
	r.sets++
	go r.runSet(es, evs, latches, prevIn, prev)
}

// handOut appends to es the key's events that may join the next set: from
// the first one in no set, those due, up to a delayed one (it holds its
// key) or one whose predecessor already failed (the key is handed out
// again once that outcome is back). A key's events are in at most two sets
// at once.
func (r *run) handOut(k *keyChain, now time.Time, es []*entry) []*entry {
	if k.placed > 0 && k.items[0].gen != k.items[k.placed-1].gen {
		// its events are in two sets already: what comes next gathers
		// here, to go in one set (and, on a key-ordered broker, one call)
		// once the first of them is back
		return es
	}
	for !k.broken && k.placed < len(k.items) {
		e := k.items[k.placed]
		if e.notBefore.After(now) {
			if e.heapIdx < 0 {
				heap.Push(&r.delayed, e)
			}
			break
		}
		var pred *entry
		if k.placed > 0 {
			pred = k.items[k.placed-1]
			if done, ok := pred.latch.State(); done && !ok {
				break
			}
		}
		e.pred, e.latch, e.gen = pred, &dispatch.Latch{}, r.gen
		k.placed++
		k.out++
		es = append(es, e)
	}
	return es
}

// runSet publishes one set through the dispatcher and reports to the
// loop: each call's results (before the dispatcher moves the keys on, so
// that a key's outcomes reach the loop in its order), each event given
// back untried, and the set's end. It runs on its own goroutine and reads
// no entry's fields.
func (r *run) runSet(es []*entry, evs []outbox.Event, latches []*dispatch.Latch, prevIn []int, prev []dispatch.Ticket) {
	cfg := r.l.cfg
	unavailable := false
	dispatch.Run(dispatch.Set{
		Events:   evs,
		PrevIn:   prevIn,
		Prev:     prev,
		Features: broker.Features{Ordering: r.l.ordering, MaxInFlight: cfg.BatchSize},
		MaxCalls: cfg.InFlight,
		NoCut:    true, // a call takes what is ready, up to BatchSize, as it always did
		PublishIdx: func(idx []int, send []outbox.Event) ([]broker.Result, bool) {
			return r.publish(es, idx, send)
		},
		Judge: func(send []outbox.Event, results []broker.Result) []bool {
			ok := make([]bool, len(send))
			var failed map[string]bool
			for i, e := range send {
				switch err := results[i].Err; {
				case e.Key != "" && failed[e.Key]:
					// held back behind its key's failure in this call
				case err == nil:
					ok[i] = true
				default:
					unavailable = unavailable || errors.Is(err, broker.ErrUnavailable)
					if e.Key != "" {
						if failed == nil {
							failed = map[string]bool{}
						}
						failed[e.Key] = true
					}
				}
			}
			return ok
		},
		Stop: func() bool {
			return unavailable || r.ctx.Err() != nil || time.Now().UnixNano() < r.paused.Load()
		},
		Wait: func(wake <-chan struct{}) bool {
			select {
			case <-wake:
				return true
			case <-r.ctx.Done():
				return false
			}
		},
		Settled: func(i int, o dispatch.Outcome) {
			if o == dispatch.GivenBack {
				r.inbox.push(report{back: es[i]})
			}
			latches[i].Resolve(o == dispatch.Confirmed)
		},
	})
	r.inbox.push(report{setDone: true})
}

// publish runs one publish call once one of the InFlight slots is free,
// and reports its results to the loop. sent false: the loop stopped first.
func (r *run) publish(es []*entry, idx []int, evs []outbox.Event) ([]broker.Result, bool) {
	cfg := r.l.cfg
	select {
	case r.slots <- struct{}{}:
	case <-r.ctx.Done():
		return nil, false
	}
	// A call that waited for its slot looks again: the loop may have
	// stopped, or learned the broker is unreachable, meanwhile (the slot
	// is freed before the loop hears of the call that held it). Its
	// events are given back untried, as Stop would have.
	if r.ctx.Err() != nil || time.Now().UnixNano() < r.paused.Load() {
		<-r.slots
		return nil, false
	}
	ctx, cancel := context.WithTimeout(r.pub, cfg.PublishTimeout)
	o := cfg.Observer
	if o != nil && o.PublishStart != nil {
		if c := o.PublishStart(ctx, evs); c != nil {
			ctx = c
		}
	}
	start := time.Now()
	res := broker.PublishResults(ctx, r.l.b, evs)
	took := time.Since(start)
	if len(res) != len(evs) { // an adapter bug: nothing it said can be trusted
		bad := fmt.Errorf("broker %T returned %d results for %d events", r.l.b, len(res), len(evs))
		res = make([]broker.Result, len(evs))
		for i := range res {
			res[i].Err = bad
		}
	}
	if o != nil && o.PublishEnd != nil {
		o.PublishEnd(ctx, evs, res, took)
	}
	cancel()
	<-r.slots // before the report: the loop, woken by it, finds the slot free
	c := &call{entries: make([]*entry, len(idx)), events: evs, results: res, took: took}
	for k, i := range idx {
		c.entries[k] = es[i]
	}
	r.inbox.push(report{call: c})
	return res, true
}

// settle takes in the sets' reports. The events given back untried (behind
// a predecessor that failed or was given back in an earlier set, or not
// sent because the loop stopped or paused) go to the Observer as one
// Settled report of held events, so that its counts add up to every event
// handed out.
func (r *run) settle(now time.Time) {
	back := 0
	for _, rep := range r.inbox.take() {
		switch {
		case rep.call != nil:
			r.settleCall(rep.call, now)
		case rep.back != nil:
			back++
			r.back(rep.back, now)
		default:
			r.sets--
		}
	}
	if o := r.l.cfg.Observer; back > 0 && o != nil && o.Settled != nil {
		o.Settled(context.Background(), Settled{Events: back, Held: back})
	}
	r.advance()
}

// settleCall sorts a call's results: confirmed, retried, parked, or held
// back behind a failure of its key (no attempt counted).
func (r *run) settleCall(c *call, now time.Time) {
	cfg := r.l.cfg
	var failedKeys map[string]bool
	var unavailable error // the first ErrUnavailable result of the call
	anyOK := false
	st := Settled{Events: len(c.entries), Took: c.took}
	for i, e := range c.entries {
		res := c.results[i]
		key := e.ev.Key
		if key != "" && failedKeys[key] {
			st.Held++
			r.back(e, now) // held back: it goes again behind the failed one
			continue
		}
		if res.Err == nil {
			anyOK = true
			st.Delivered++
			r.l.delivered.Add(1)
			if cfg.OnDelivered != nil {
				cfg.OnDelivered(e.ev, res)
			}
			r.done(e)
			continue
		}
		if key != "" {
			if failedKeys == nil {
				failedKeys = map[string]bool{}
			}
			failedKeys[key] = true
		}
		if errors.Is(res.Err, broker.ErrNotAttempted) {
			// The adapter did not send it: it stood behind a failure of
			// its ordered unit (a Kafka partition shared with another
			// key). It goes again, uncharged; its key's later events
			// are held behind it (failedKeys, above).
			st.Held++
			r.back(e, now)
			continue
		}
		if errors.Is(res.Err, broker.ErrUnavailable) {
			st.Held++
			e.notBefore = time.Time{}
			if unavailable == nil {
				unavailable = res.Err
			}
			r.back(e, now)
			continue
		}
		e.attempts++
		if dead, reason := retry.Dead(res.Err, e.attempts, cfg.MaxAttempts); dead {
			r.parks = append(r.parks, Parked{Event: e.ev, Pos: e.txn.pos, Attempts: e.attempts, Reason: reason})
			r.l.dead.Add(1)
			st.Dead++
			r.done(e)
			continue
		}
		r.l.retried.Add(1)
		st.Retried++
		e.notBefore = now.Add(retry.Delay(cfg.BackoffBase, cfg.BackoffMax, e.attempts, res.Err))
		r.back(e, now)
	}
	if unavailable != nil {
		// one backoff step per call that could not reach the broker, not
		// one per event of it
		r.unavailable++
		r.pauseUntil = now.Add(r.backoff(r.unavailable))
		r.paused.Store(r.pauseUntil.UnixNano())
		if r.unavailable == 1 {
			cfg.Logger.Warn("outbox cdc: broker unavailable; backing off", "error", unavailable.Error())
		}
	}
	if anyOK && r.unavailable > 0 {
		r.unavailable = 0
		cfg.Logger.Info("outbox cdc: broker available again")
	}
	if o := cfg.Observer; o != nil && o.Settled != nil {
		o.Settled(context.Background(), st)
	}
}

// back takes e back from its set unsettled (retried, held back, given
// back): a keyless event is due again at its notBefore; a key is handed
// out again from its first event once all its outcomes are back.
func (r *run) back(e *entry, now time.Time) {
	e.latch = nil
	k := e.k
	if k == nil {
		r.enqueue(e, now)
		return
	}
	k.out--
	k.broken = true
	r.check(k)
}

// done settles e: off its key's events and its transaction's count.
func (r *run) done(e *entry) {
	e.latch = nil
	e.txn.left--
	r.live--
	k := e.k
	if k == nil {
		return
	}
	// a key's events settle in order: e is its first
	if len(k.items) > 0 && k.items[0] == e {
		k.items[0] = nil
		k.items = k.items[1:]
	} else if i := slices.Index(k.items, e); i >= 0 {
		k.items = slices.Delete(k.items, i, i+1)
	}
	k.placed--
	k.out--
	r.check(k)
}

// check lets a key go on after one of its outcomes came back: once none
// of its events is in a set, it is forgotten when it has none left, else
// handed out again.
func (r *run) check(k *keyChain) {
	if k.out > 0 {
		if !k.broken && k.placed < len(k.items) {
			r.markDirty(k) // its gathered events may go now
		}
		return
	}
	k.broken, k.placed = false, 0
	if len(k.items) == 0 {
		if r.keys[k.key] == k {
			delete(r.keys, k.key)
		}
		return
	}
	r.markDirty(k)
}

// advance moves ackWanted past the leading fully settled transactions.
func (r *run) advance() {
	n := 0
	for n < len(r.txns) && r.txns[n].left == 0 {
		if p := r.txns[n].pos; p > r.ackWanted {
			r.ackWanted = p
		}
		n++
	}
	if n > 0 {
		clear(r.txns[:n])
		r.txns = r.txns[n:]
	}
}

// promote makes the delayed events whose time came due.
func (r *run) promote(now time.Time) {
	for len(r.delayed) > 0 && !r.delayed[0].notBefore.After(now) {
		e := heap.Pop(&r.delayed).(*entry)
		if e.k != nil {
			r.markDirty(e.k)
		} else {
			r.loose = append(r.loose, e)
		}
	}
}

// wakeAt is how long until something timed is due.
func (r *run) wakeAt(now time.Time) time.Duration {
	d := time.Hour
	if len(r.delayed) > 0 {
		d = min(d, r.delayed[0].notBefore.Sub(now))
	}
	if (len(r.loose) > 0 || len(r.dirty) > 0) && now.Before(r.pauseUntil) {
		d = min(d, r.pauseUntil.Sub(now))
	}
	if now.Before(r.ackRetry) {
		d = min(d, r.ackRetry.Sub(now))
	}
	return max(d, time.Millisecond)
}

// backoff is the pause after attempt consecutive calls found the broker
// unreachable.
func (r *run) backoff(attempt int) time.Duration {
	return retry.Jitter(retry.Backoff(r.l.cfg.BackoffBase, r.l.cfg.BackoffMax, attempt))
}

type delayHeap []*entry

func (h delayHeap) Len() int           { return len(h) }
func (h delayHeap) Less(i, j int) bool { return h[i].notBefore.Before(h[j].notBefore) }
func (h delayHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *delayHeap) Push(x any) {
	e := x.(*entry)
	e.heapIdx = len(*h)
	*h = append(*h, e)
}
func (h *delayHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.heapIdx = -1
	return e
}
