package pollsource

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/outbox-go/outbox/source"
	"github.com/outbox-go/outbox/store"
)

// Config tunes a Source. Zero values take the documented defaults;
// negative ones are refused.
type Config struct {
	// Owner names this process in leases; default host-pid-random, at
	// most 64 characters. Must be unique among running processes.
	Owner string
	// BatchSize is the most events one claim takes; default 500.
	BatchSize int
	// LeaseFor is how long a claim holds unless renewed; default 30s,
	// at least 100ms. Held claims are renewed every third of it.
	LeaseFor time.Duration
	// PollInterval is how often an idle Next looks for events without a
	// wake-up from the store (store.Notifier); default 500ms.
	PollInterval time.Duration
	// HoldDeadKeys makes a DEAD event hold its key's later events in the
	// store until an operator requeues or purges it. Default false: the
	// delivery loop lets a key's later events flow past a parked one.
	HoldDeadKeys bool
	// Logger receives state changes; default slog.Default().
	Logger *slog.Logger
}

// WithDefaults fills the defaults and validates c.
func (c Config) WithDefaults() (Config, error) {
	for _, f := range []struct {
		name string
		neg  bool
	}{{"BatchSize", c.BatchSize < 0}, {"LeaseFor", c.LeaseFor < 0}, {"PollInterval", c.PollInterval < 0}} {
		if f.neg {
			return c, fmt.Errorf("pollsource: %s must not be negative (0 means the default)", f.name)
		}
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		if len(host) > 32 {
			host = host[:32]
		}
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.Owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
	}
	if len(c.Owner) > 64 {
		return c, fmt.Errorf("pollsource: Owner %q is longer than 64 characters", c.Owner)
	}
	if c.BatchSize == 0 {
		c.BatchSize = 500
	}
	if c.LeaseFor == 0 {
		c.LeaseFor = 30 * time.Second
	}
	if c.LeaseFor < 100*time.Millisecond {
		return c, errors.New("pollsource: LeaseFor must be at least 100ms")
	}
	if c.PollInterval == 0 {
		c.PollInterval = 500 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Source is a store.Store read by claims, as a source.Source.
type Source struct {
	st  store.Store
	cfg Config

	// wake is poked by the store's Notifier (and by Wake).
	wake chan struct{}

	mu     sync.Mutex
	epoch  int64
	next   source.Position // the last position handed out
	acked  source.Position
	claims []*claim         // in position order; settled ones are dropped
	byID   map[int64]*claim // unsettled event id → its claim
	closed bool

	stop context.CancelFunc
	done sync.WaitGroup
}

// claim is one claimed batch: its events' ids in position order from
// first, which of them are settled, and whether its lease is lost.
type claim struct {
	// wmu serializes the claim's writes (Ack, Park, Extend), so that a
	// renewal never names an event settled meanwhile (the store would
	// refuse the lease for it).
	wmu     sync.Mutex
	lease   store.Lease
	first   source.Position
	ids     []int64
	settled []bool // acked, parked, or released
	left    int    // not settled
	acked   int    // acked through Ack (all of them: AckClaim)
	parked  int
	until   time.Time // local estimate of the lease's end
	lost    bool
}

var _ source.Source = (*Source)(nil)

// New returns a Source over st and starts renewing its leases; Close stops
// it. cfg is validated.
func New(st store.Store, cfg Config) (*Source, error) {
	if st == nil {
		return nil, errors.New("pollsource: New needs a store")
	}
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	s := &Source{st: st, cfg: cfg, wake: make(chan struct{}, 1), byID: map[int64]*claim{}}
	// epochs start from the clock, so that a Source restarted under the
	// same Owner never reuses one of its earlier life
	s.epoch = time.Now().UnixMicro()
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	s.done.Add(1)
	go func() { defer s.done.Done(); s.renew(ctx) }()
	if n, ok := st.(store.Notifier); ok {
		ch := n.Notify(ctx)
		s.done.Add(1)
		go func() {
			defer s.done.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case <-ch:
					s.Wake()
				}
			}
		}()
	}
	return s, nil
}

// Owner returns the name this Source uses in leases.
func (s *Source) Owner() string { return s.cfg.Owner }

// Wake makes a waiting Next claim now: call it after committing events in
// the same process when the store has no Notifier of its own.
func (s *Source) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Next claims a batch, waiting (PollInterval, or a wake-up) while there is
// none; each claimed event is a Txn of its own.
func (s *Source) Next(ctx context.Context) ([]source.Txn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	failures := 0
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, errors.New("pollsource: Next after Close")
		}
		s.epoch++
		lease := store.Lease{Owner: s.cfg.Owner, Epoch: s.epoch}
		s.mu.Unlock()
		start := time.Now()
		// A claim is not cut short by ctx: one that committed while the
		// client gave up would hold its events until the lease ran out.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(s.cfg.LeaseFor/2, 5*time.Second))
		c, err := s.st.Claim(cctx, store.ClaimRequest{Lease: lease, Limit: s.cfg.BatchSize, LeaseFor: s.cfg.LeaseFor, HoldDeadKeys: s.cfg.HoldDeadKeys})
		cancel()
		wait := s.cfg.PollInterval
		switch {
		case err != nil:
			failures++
			wait = min(s.cfg.PollInterval<<min(failures, 6), 30*time.Second)
			if failures == 1 {
				s.cfg.Logger.Warn("pollsource: claiming failed; retrying", "error", err.Error())
			}
		case len(c.Events) > 0:
			if ctx.Err() != nil {
				// the caller is gone: give the batch back at once
				rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = s.st.Release(rctx, lease, eventIDs(c))
				cancel()
				return nil, ctx.Err()
			}
			return s.took(lease, start, c), nil
		default:
			failures = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-s.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

func eventIDs(c store.Claim) []int64 {
	ids := make([]int64, len(c.Events))
	for i, e := range c.Events {
		ids[i] = e.ID
	}
	return ids
}

// took records a claim and hands its events out.
func (s *Source) took(lease store.Lease, start time.Time, c store.Claim) []source.Txn {
	s.mu.Lock()
	defer s.mu.Unlock()
	cl := &claim{lease: lease, first: s.next + 1, ids: eventIDs(c), settled: make([]bool, len(c.Events)), left: len(c.Events), until: start.Add(s.cfg.LeaseFor)}
	s.claims = append(s.claims, cl)
	txns := make([]source.Txn, len(c.Events))
	for i, e := range c.Events {
		s.next++
		s.byID[e.ID] = cl
		txns[i] = source.Txn{Pos: s.next, Events: c.Events[i : i+1 : i+1]}
	}
	return txns
}

// fenced is the error for a lost lease.
func fenced(l store.Lease, err error) error {
	if err == nil {
		return fmt.Errorf("%w (claim %s/%d: its lease ran out before it could be renewed)", source.ErrFenced, l.Owner, l.Epoch)
	}
	return fmt.Errorf("%w (claim %s/%d: %v)", source.ErrFenced, l.Owner, l.Epoch, err)
}

// Ack marks every unsettled event up to pos delivered in the store
// (deleted, or archived as SENT). Already acknowledged positions are
// ignored.
func (s *Source) Ack(ctx context.Context, pos source.Position) error {
	type work struct {
		cl  *claim
		idx []int
	}
	s.mu.Lock()
	if pos <= s.acked {
		s.mu.Unlock()
		return nil
	}
	var todo []work
	for _, cl := range s.claims {
		if cl.first > pos {
			break
		}
		w := work{cl: cl}
		for i := range cl.ids {
			if cl.first+source.Position(i) <= pos && !cl.settled[i] {
				w.idx = append(w.idx, i)
			}
		}
		if len(w.idx) > 0 {
			if cl.lost {
				s.mu.Unlock()
				return fenced(cl.lease, nil)
			}
			todo = append(todo, w)
		}
	}
	s.mu.Unlock()
	for _, w := range todo {
		w.cl.wmu.Lock()
		err := s.ack(ctx, w.cl, w.idx)
		w.cl.wmu.Unlock()
		if err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.acked = max(s.acked, pos)
	s.mu.Unlock()
	return nil
}

// ack acks cl's events at idx that are still unsettled; under cl.wmu.
func (s *Source) ack(ctx context.Context, cl *claim, idx []int) error {
	s.mu.Lock()
	idx = slices.DeleteFunc(slices.Clone(idx), func(i int) bool { return cl.settled[i] })
	lost := cl.lost
	s.mu.Unlock()
	if len(idx) == 0 {
		return nil
	}
	if lost {
		return fenced(cl.lease, nil)
	}
	w := struct {
		cl  *claim
		idx []int
	}{cl, idx}
	{
		ids := make([]int64, len(w.idx))
		for i, j := range w.idx {
			ids[i] = w.cl.ids[j]
		}
		var err error
		if ca, ok := s.st.(store.ClaimAcker); ok && len(ids) == len(w.cl.ids) {
			// every event of the claim was delivered: ack it as a whole
			err = ca.AckClaim(ctx, w.cl.lease, len(ids))
		} else {
			err = s.st.Ack(ctx, w.cl.lease, ids)
		}
		if errors.Is(err, store.ErrLeaseLost) {
			s.mu.Lock()
			w.cl.lost = true
			s.mu.Unlock()
			return fenced(w.cl.lease, err)
		}
		if err != nil {
			return fmt.Errorf("pollsource: acknowledging %d events: %w", len(ids), err)
		}
		s.mu.Lock()
		for _, j := range w.idx {
			s.settle(w.cl, j)
		}
		w.cl.acked += len(w.idx)
		s.mu.Unlock()
	}
	return nil
}

// settle marks cl's i-th event settled and forgets fully settled claims
// at the front. Under mu.
func (s *Source) settle(cl *claim, i int) {
	if cl.settled[i] {
		return
	}
	cl.settled[i] = true
	cl.left--
	delete(s.byID, cl.ids[i])
	n := 0
	for n < len(s.claims) && s.claims[n].left == 0 {
		n++
	}
	if n > 0 {
		clear(s.claims[:n])
		s.claims = s.claims[n:]
	}
}

// Park buries events DEAD in the store with their reasons. The events must
// be this Source's, not yet acknowledged.
func (s *Source) Park(ctx context.Context, parked []source.Parked) error {
	type work struct {
		cl      *claim
		burials []store.Burial
		idx     []int
	}
	var todo []*work
	by := map[*claim]*work{}
	s.mu.Lock()
	for _, p := range parked {
		cl := s.byID[p.Event.ID]
		if cl == nil {
			s.mu.Unlock()
			return fmt.Errorf("pollsource: Park: event %d (%s) is not one this Source handed out and has not settled", p.Event.ID, p.Event.EventID)
		}
		if cl.lost {
			s.mu.Unlock()
			return fenced(cl.lease, nil)
		}
		w := by[cl]
		if w == nil {
			w = &work{cl: cl}
			by[cl] = w
			todo = append(todo, w)
		}
		reason := p.Reason
		if reason == "" {
			reason = "parked by the delivery loop (no reason given)"
		}
		w.burials = append(w.burials, store.Burial{ID: p.Event.ID, Error: reason})
		for i, id := range cl.ids {
			if id == p.Event.ID {
				w.idx = append(w.idx, i)
			}
		}
	}
	s.mu.Unlock()
	for _, w := range todo {
		w.cl.wmu.Lock()
		err := s.st.Bury(ctx, w.cl.lease, w.burials)
		w.cl.wmu.Unlock()
		if errors.Is(err, store.ErrLeaseLost) {
			s.mu.Lock()
			w.cl.lost = true
			s.mu.Unlock()
			return fenced(w.cl.lease, err)
		}
		if err != nil {
			return fmt.Errorf("pollsource: parking %d events: %w", len(w.burials), err)
		}
		s.mu.Lock()
		for _, i := range w.idx {
			s.settle(w.cl, i)
		}
		w.cl.parked += len(w.idx)
		s.mu.Unlock()
	}
	return nil
}

// renew extends the held claims' leases every third of LeaseFor.
func (s *Source) renew(ctx context.Context) {
	every := s.cfg.LeaseFor / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		var cls []*claim
		for _, cl := range s.claims {
			if !cl.lost && cl.left > 0 {
				cls = append(cls, cl)
			}
		}
		s.mu.Unlock()
		for _, cl := range cls {
			cl.wmu.Lock()
			s.mu.Lock()
			var ids []int64
			for i, id := range cl.ids {
				if !cl.settled[i] {
					ids = append(ids, id)
				}
			}
			s.mu.Unlock()
			if len(ids) == 0 {
				cl.wmu.Unlock()
				continue
			}
			h := struct {
				cl  *claim
				ids []int64
			}{cl, ids}
			before := time.Now()
			ectx, cancel := context.WithTimeout(ctx, every)
			_, err := s.st.Extend(ectx, h.cl.lease, h.ids, s.cfg.LeaseFor)
			cancel()
			cl.wmu.Unlock()
			if ctx.Err() != nil {
				return
			}
			s.mu.Lock()
			switch {
			case err == nil:
				h.cl.until = before.Add(s.cfg.LeaseFor)
			case errors.Is(err, store.ErrLeaseLost) || time.Now().After(h.cl.until):
				if !h.cl.lost {
					s.cfg.Logger.Warn("pollsource: a claim's lease is lost; its events go to whoever claims them next", "lease", h.cl.lease.Epoch, "events", len(h.ids), "error", fmt.Sprint(err))
				}
				h.cl.lost = true
			default:
				s.cfg.Logger.Warn("pollsource: renewing a lease failed; retrying", "error", err.Error())
			}
			s.mu.Unlock()
		}
	}
}

// Close stops renewing and gives back what was claimed and not settled.
func (s *Source) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.stop()
	s.done.Wait()
	s.mu.Lock()
	type held struct {
		lease store.Lease
		ids   []int64
	}
	var hs []held
	for _, cl := range s.claims {
		if cl.lost || cl.left == 0 {
			continue
		}
		h := held{lease: cl.lease}
		for i, id := range cl.ids {
			if !cl.settled[i] {
				h.ids = append(h.ids, id)
			}
		}
		hs = append(hs, h)
	}
	s.claims, s.byID = nil, map[int64]*claim{}
	s.mu.Unlock()
	var errs []error
	for _, h := range hs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.st.Release(ctx, h.lease, h.ids); err != nil && !errors.Is(err, store.ErrLeaseLost) {
			errs = append(errs, err)
		}
		cancel()
	}
	if len(errs) > 0 {
		return fmt.Errorf("pollsource: giving back unsettled events (their leases run out instead): %w", errors.Join(errs...))
	}
	return nil
}
