package source

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
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
	// Settled is told how each publish call's events were settled.
	Settled func(ctx context.Context, s Settled)
	// Acked is told the outcome of each Park-and-Ack round.
	Acked func(ctx context.Context, pos Position, parked int, err error)
}

// Settled counts one publish call's outcomes.
type Settled struct {
	Events    int           // in the call
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

type entry struct {
	ev        outbox.Event
	txn       *txnState
	attempts  int
	notBefore time.Time
	q         *keyQueue // nil for a keyless event
	heapIdx   int
}

type keyQueue struct {
	key   string
	items []*entry // FIFO in commit order; items[0] is the key's head
	busy  bool     // the head (and maybe more) is in a publish call
}

type call struct {
	entries []*entry
	results []broker.Result
	took    time.Duration
}

type ackReq struct {
	parks []Parked
	pos   Position
}

type ackDone struct {
	req ackReq
	err error
}

// run is the loop's state, owned by Run's goroutine.
type run struct {
	l        *Loop
	keys     map[string]*keyQueue
	ready    []*entry
	delayed  delayHeap
	txns     []*txnState
	live     int // unsettled events
	inFlight int

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
	r := &run{l: l, keys: map[string]*keyQueue{}}
	cfg := l.cfg

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

	results := make(chan call, cfg.InFlight)
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
	for {
		now := time.Now()
		r.promote(now)
		if !stopping {
			for r.inFlight < cfg.InFlight && len(r.ready) > 0 && !now.Before(r.pauseUntil) {
				r.launch(pubBase, results, now)
			}
		}
		if !r.ackBusy && !now.Before(r.ackRetry) && (len(r.parks) > 0 || r.ackWanted > r.ackSent) {
			req := ackReq{parks: r.parks, pos: r.ackWanted}
			r.parks = nil
			r.ackBusy = true
			acks <- req
		}
		if stopping && r.inFlight == 0 && !r.ackBusy {
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
				stopping = true
			}
		case c := <-results:
			r.inFlight--
			r.settle(c, time.Now())
		case d := <-acked:
			r.ackBusy = false
			if d.err != nil {
				r.parks = append(d.req.parks, r.parks...)
				if errors.Is(d.err, ErrFenced) {
					failure = d.err
					stopping = true
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
			stopping = true
			stopRead()
		case <-timer.C:
		}
	}
}

// add queues newly committed transactions.
func (r *run) add(txns []Txn) {
	now := time.Now()
	for _, t := range txns {
		ts := &txnState{pos: t.Pos, left: len(t.Events)}
		r.txns = append(r.txns, ts)
		for i := range t.Events {
			// a delayed event (Message.AvailableAt) waits, and holds its key
			e := &entry{ev: t.Events[i], txn: ts, attempts: t.Events[i].Attempts, heapIdx: -1, notBefore: t.Events[i].AvailableAt}
			r.live++
			if e.ev.Key == "" {
				r.enqueue(e, now)
				continue
			}
			q := r.keys[e.ev.Key]
			if q == nil {
				q = &keyQueue{key: e.ev.Key}
				r.keys[e.ev.Key] = q
			}
			e.q = q
			q.items = append(q.items, e)
			if len(q.items) == 1 && !q.busy {
				r.enqueue(e, now)
			}
		}
	}
	r.advance()
}

// enqueue makes e ready, or delayed until its notBefore.
func (r *run) enqueue(e *entry, now time.Time) {
	if e.notBefore.After(now) {
		heap.Push(&r.delayed, e)
		return
	}
	r.ready = append(r.ready, e)
}

// launch publishes up to BatchSize ready events in one call.
func (r *run) launch(base context.Context, results chan<- call, now time.Time) {
	cfg := r.l.cfg
	var c call
	n := 0
	for n < len(r.ready) && len(c.entries) < cfg.BatchSize {
		e := r.ready[n]
		n++
		if e.q == nil {
			c.entries = append(c.entries, e)
			continue
		}
		e.q.busy = true
		c.entries = append(c.entries, e)
		if r.l.ordering >= broker.OrderKey {
			// the broker keeps a key's order within a call: send its
			// next events too, right after
			for _, next := range e.q.items[1:] {
				if len(c.entries) >= cfg.BatchSize || next.notBefore.After(now) {
					break
				}
				c.entries = append(c.entries, next)
			}
		}
	}
	r.ready = r.ready[n:]
	if len(r.ready) == 0 {
		r.ready = nil
	}
	r.inFlight++
	evs := make([]outbox.Event, len(c.entries))
	for i, e := range c.entries {
		evs[i] = e.ev
		evs[i].Attempts = e.attempts
	}
	go func() {
		ctx, cancel := context.WithTimeout(base, cfg.PublishTimeout)
		defer cancel()
		o := cfg.Observer
		if o != nil && o.PublishStart != nil {
			if c := o.PublishStart(ctx, evs); c != nil {
				ctx = c
			}
		}
		start := time.Now()
		res := broker.PublishResults(ctx, r.l.b, evs)
		c.took = time.Since(start)
		if len(res) != len(evs) { // an adapter bug: nothing it said can be trusted
			bad := fmt.Errorf("broker %T returned %d results for %d events", r.l.b, len(res), len(evs))
			res = make([]broker.Result, len(evs))
			for i := range res {
				res[i].Err = bad
			}
		}
		c.results = res
		if o != nil && o.PublishEnd != nil {
			o.PublishEnd(ctx, evs, res, c.took)
		}
		results <- c
	}()
}

// settle sorts a call's results: confirmed, retried, parked, or held back
// behind a failure of its key (no attempt counted).
func (r *run) settle(c call, now time.Time) {
	cfg := r.l.cfg
	failedKeys := map[*keyQueue]bool{}
	touched := map[*keyQueue]bool{}
	anyOK := false
	st := Settled{Events: len(c.entries), Took: c.took}
	defer func() {
		if o := cfg.Observer; o != nil && o.Settled != nil {
			o.Settled(context.Background(), st)
		}
	}()
	for i, e := range c.entries {
		res := c.results[i]
		if e.q != nil {
			touched[e.q] = true
		}
		if e.q != nil && failedKeys[e.q] {
			st.Held++
			continue // held back: stays in its queue, behind the failed one
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
		if e.q != nil {
			failedKeys[e.q] = true
		}
		if errors.Is(res.Err, broker.ErrUnavailable) {
			st.Held++
			e.notBefore = time.Time{}
			r.unavailable++
			r.pauseUntil = now.Add(r.backoff(r.unavailable))
			if r.unavailable == 1 {
				cfg.Logger.Warn("outbox cdc: broker unavailable; backing off", "error", res.Err.Error())
			}
			if e.q == nil {
				r.ready = append(r.ready, e)
			}
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
		if e.q == nil {
			heap.Push(&r.delayed, e)
		}
	}
	if anyOK && r.unavailable > 0 {
		r.unavailable = 0
		cfg.Logger.Info("outbox cdc: broker available again")
	}
	for q := range touched {
		q.busy = false
		if len(q.items) == 0 {
			delete(r.keys, q.key)
			continue
		}
		head := q.items[0]
		if head.notBefore.After(now) {
			heap.Push(&r.delayed, head)
		} else {
			r.ready = append(r.ready, head)
		}
	}
	r.advance()
}

// done settles e: off its key's queue and its transaction's count.
func (r *run) done(e *entry) {
	if q := e.q; q != nil {
		// e is its key's head: a key's events settle in order
		if len(q.items) > 0 && q.items[0] == e {
			q.items[0] = nil
			q.items = q.items[1:]
		}
	}
	e.txn.left--
	r.live--
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

// promote moves delayed events whose time came to ready.
func (r *run) promote(now time.Time) {
	for len(r.delayed) > 0 && !r.delayed[0].notBefore.After(now) {
		e := heap.Pop(&r.delayed).(*entry)
		r.ready = append(r.ready, e)
	}
}

// wakeAt is how long until something timed is due.
func (r *run) wakeAt(now time.Time) time.Duration {
	d := time.Hour
	if len(r.delayed) > 0 {
		d = min(d, r.delayed[0].notBefore.Sub(now))
	}
	if len(r.ready) > 0 && now.Before(r.pauseUntil) {
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
