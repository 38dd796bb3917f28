package dashboard

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/outbox-go/outbox/internal/redact"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
)

// heldScan is how many dead events (the first, in id order) the sampler
// reads to list the keys they hold, and heldEvery how often.
const (
	heldScan  = 50
	heldEvery = 5 * time.Second
)

// sample is one point of the chart.
type sample struct {
	at      time.Time
	ok      bool // the backlog could be read
	backlog store.Backlog
	// deadCapped: backlog.Dead is store.Backlog's cap, not a count
	deadCapped bool
	// relay's cumulative counters at that time (zero without a relay)
	delivered, failed int64
}

// heldKey is a key held by dead events, among the first heldScan of them.
type heldKey struct {
	Topic string `json:"topic"`
	Key   string `json:"key"`
	Dead  int    `json:"dead"`
}

// sampler reads the backlog and the relay's counters at a fixed rate, so
// that what the page costs the database does not depend on how many pages
// are open: every request reads the last samples from memory.
type sampler struct {
	st      store.Store
	backlog store.BacklogReader // nil: fall back to Stats
	relay   *relay.Relay

	mu       sync.Mutex
	ring     []sample // oldest first, at most cap
	cap      int
	lastErr  string
	held     []heldKey
	heldAt   time.Time
	heldFull bool // every dead event was scanned
	heldErr  string
	heldDead int64 // the dead count when the keys were scanned
}

func newSampler(st store.Store, r *relay.Relay, history int) *sampler {
	s := &sampler{st: st, relay: r, cap: history}
	if br, ok := st.(store.BacklogReader); ok {
		s.backlog = br
	}
	return s
}

func (s *sampler) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.take(ctx, every)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// take records one sample; a query is bounded by the sampling interval
// (at least a second), so a slow database delays samples instead of
// piling them up.
func (s *sampler) take(ctx context.Context, every time.Duration) {
	qctx, cancel := context.WithTimeout(ctx, max(every, time.Second))
	defer cancel()
	smp := sample{at: time.Now()}
	var err error
	if s.backlog != nil {
		smp.backlog, err = s.backlog.Backlog(qctx)
		smp.deadCapped = smp.backlog.Dead >= store.DeadCap
	} else {
		var st store.Stats
		st, err = s.st.Stats(qctx)
		smp.backlog = store.Backlog{Pending: st.Pending(), OldestPendingAge: st.OldestPending, Dead: st.Dead}
	}
	smp.ok = err == nil
	if s.relay != nil {
		h := s.relay.Health()
		smp.delivered, smp.failed = h.Delivered, h.Retried+h.Dead
	}
	if ctx.Err() != nil {
		return // stopping: not a failure of the store
	}
	s.mu.Lock()
	if len(s.ring) == s.cap {
		copy(s.ring, s.ring[1:])
		s.ring = s.ring[:len(s.ring)-1]
	}
	s.ring = append(s.ring, smp)
	s.lastErr = ""
	if err != nil {
		s.lastErr = redact.Text(err.Error())
	}
	// Rescan at once when the number of dead events changed.
	due := time.Since(s.heldAt) >= heldEvery || (smp.ok && smp.backlog.Dead != s.heldDead)
	s.mu.Unlock()
	if due {
		s.scanHeld(qctx, smp.backlog.Dead)
	}
}

// scanHeld lists the keys of the first heldScan dead events.
func (s *sampler) scanHeld(ctx context.Context, dead int64) {
	recs, err := s.st.ListDead(ctx, store.DeadQuery{Limit: heldScan})
	if ctx.Err() != nil && err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heldAt = time.Now()
	if err != nil {
		s.heldErr = redact.Text(err.Error())
		return
	}
	s.heldErr, s.heldDead = "", dead
	byKey := map[[2]string]int{}
	for _, r := range recs {
		if r.Key != "" {
			byKey[[2]string{r.Topic, r.Key}]++
		}
	}
	held := make([]heldKey, 0, len(byKey))
	for k, n := range byKey {
		held = append(held, heldKey{Topic: clipText(k[0], 200), Key: clipText(k[1], 200), Dead: n})
	}
	sort.Slice(held, func(i, j int) bool {
		if held[i].Topic != held[j].Topic {
			return held[i].Topic < held[j].Topic
		}
		return held[i].Key < held[j].Key
	})
	s.held, s.heldFull = held, len(recs) < heldScan
}

// point is one sample as the API shows it; rates are per second since the
// sample before (null for the first, and without a relay).
type point struct {
	T             int64    `json:"t"` // Unix milliseconds
	Pending       *int64   `json:"pending"`
	Dead          *int64   `json:"dead"`
	OldestSeconds *float64 `json:"oldest_pending_seconds"`
	DeliveredPerS *float64 `json:"delivered_per_second"`
	FailedPerS    *float64 `json:"failed_per_second"`
}

// snapshot is what /api/overview shows of the samples.
type snapshot struct {
	series   []point
	last     *sample // nil before the first
	lastErr  string
	held     []heldKey
	heldFull bool
	heldErr  string
	// etaSeconds: the pending events over the net drain rate of the last
	// minute; nil when the backlog is not shrinking.
	etaSeconds, drainPerS *float64
}

func (s *sampler) snapshot(withRelay bool) snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := snapshot{lastErr: s.lastErr, held: s.held, heldFull: s.heldFull, heldErr: s.heldErr, series: make([]point, 0, len(s.ring))}
	for i := range s.ring {
		smp := &s.ring[i]
		p := point{T: smp.at.UnixMilli()}
		if smp.ok {
			pending, dead, oldest := smp.backlog.Pending, smp.backlog.Dead, smp.backlog.OldestPendingAge.Seconds()
			p.Pending, p.Dead, p.OldestSeconds = &pending, &dead, &oldest
		}
		if withRelay && i > 0 {
			prev := &s.ring[i-1]
			if dt := smp.at.Sub(prev.at).Seconds(); dt > 0 {
				dr, fr := float64(smp.delivered-prev.delivered)/dt, float64(smp.failed-prev.failed)/dt
				p.DeliveredPerS, p.FailedPerS = &dr, &fr
			}
		}
		out.series = append(out.series, p)
	}
	if n := len(s.ring); n > 0 {
		last := s.ring[n-1]
		out.last = &last
		out.etaSeconds, out.drainPerS = eta(s.ring, time.Minute)
	}
	return out
}

// eta compares the newest readable sample with the oldest readable one at
// most window before it.
func eta(ring []sample, window time.Duration) (etaSeconds, drainPerS *float64) {
	newest := -1
	for i := len(ring) - 1; i >= 0; i-- {
		if ring[i].ok {
			newest = i
			break
		}
	}
	if newest < 0 {
		return nil, nil
	}
	n := ring[newest]
	if n.backlog.Pending == 0 {
		zero := 0.0
		return &zero, nil
	}
	for i := 0; i < newest; i++ {
		o := ring[i]
		if !o.ok || n.at.Sub(o.at) > window {
			continue
		}
		dt := n.at.Sub(o.at).Seconds()
		rate := float64(o.backlog.Pending-n.backlog.Pending) / dt
		if rate <= 0 {
			return nil, &rate
		}
		e := float64(n.backlog.Pending) / rate
		return &e, &rate
	}
	return nil, nil
}
