package relay

import (
	"container/heap"
	"context"
	"slices"
	"time"

	"github.com/outbox-go/outbox/source"
)

// settle takes in the sets' reports. The events released untried (behind
// a predecessor that failed or was released in an earlier set, or not
// sent because the loop stopped or paused) go to the settle hooks as one
// report of released events without a call, so that the reports add up to
// every event handed out.
func (l *logRun) settle(now time.Time) {
	back := 0
	for _, rep := range l.reports.take() {
		switch {
		case rep.call != nil:
			l.settleCall(rep.call, now)
		case rep.back != nil:
			back++
			l.back(rep.back, now)
		default:
			l.sets--
		}
	}
	if back > 0 {
		l.r.settled(BatchReport{Claimed: back, Released: back}, false)
	}
	l.advance()
}

// settleCall files a call's results as judge decides them: confirmed,
// retried, buried, or released (no attempt counted).
func (l *logRun) settleCall(c *call, now time.Time) {
	cfg := l.r.cfg
	j := l.r.judge(c.events, c.results, c.cutShort)
	st := BatchReport{Claimed: len(c.entries), Duration: c.took}
	for i, e := range c.entries {
		switch v := j.each[i]; v.verdict {
		case confirmed:
			st.Delivered++
			l.done(e)
		case givenBack:
			st.Released++
			l.back(e, now)
		case dead:
			e.attempts = v.attempt
			l.burials = append(l.burials, source.Burial{Event: e.ev, Pos: e.txn.pos, Attempts: v.attempt, Reason: v.reason})
			st.Dead++
			l.done(e)
		case retried:
			e.attempts = v.attempt
			st.Retried++
			e.notBefore = now.Add(l.r.retryDelay(v.attempt, v.err))
			l.back(e, now)
		}
	}
	if j.unavailable != nil {
		// one backoff step per call that could not reach the broker, not
		// one per event of it
		l.unavailable++
		l.pauseUntil = now.Add(l.backoff(l.unavailable))
		l.paused.Store(l.pauseUntil.UnixNano())
		if l.unavailable == 1 {
			cfg.Logger.Warn("relay: broker unavailable; backing off", "error", j.unavailable.Error())
		}
	}
	if j.confirmed > 0 && l.unavailable > 0 {
		l.unavailable = 0
		cfg.Logger.Info("relay: broker available again")
	}
	l.r.brokerHealth(j.brokerErr(), j.confirmed)
	l.r.settled(st, true)
}

// settled counts one report of a source's events (a publish call's
// outcomes, or events released without one) and tells the settle hooks.
func (r *Relay) settled(rep BatchReport, call bool) {
	r.inFlight.Add(-int64(rep.Delivered + rep.Dead))
	if rep.Delivered > 0 {
		stamp(&r.lastDelivered)
	}
	if call {
		r.totals.Batches.Add(1)
	}
	r.totals.Delivered.Add(int64(rep.Delivered))
	r.totals.Retried.Add(int64(rep.Retried))
	r.totals.Dead.Add(int64(rep.Dead))
	r.totals.Released.Add(int64(rep.Released))
	for _, h := range r.hooks.settle {
		h.OnSettle(context.Background(), rep)
	}
}

// back takes e back from its set unsettled (retried, held back, given
// back): a keyless event is due again at its notBefore; a key is handed
// out again from its first event once all its outcomes are back.
func (l *logRun) back(e *entry, now time.Time) {
	e.latch = nil
	k := e.k
	if k == nil {
		l.enqueue(e, now)
		return
	}
	k.out--
	k.broken = true
	l.check(k)
}

// done settles e: off its key's events and its transaction's count.
func (l *logRun) done(e *entry) {
	e.latch = nil
	e.txn.left--
	l.live--
	l.r.bytes.give(int64(len(e.ev.Payload)))
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
	l.check(k)
}

// check lets a key go on after one of its outcomes came back: once none
// of its events is in a set, it is forgotten when it has none left, else
// handed out again.
func (l *logRun) check(k *keyChain) {
	if k.out > 0 {
		if !k.broken && k.placed < len(k.items) {
			l.markDirty(k) // its gathered events may go now
		}
		return
	}
	k.broken, k.placed = false, 0
	if len(k.items) == 0 {
		if l.keys[k.key] == k {
			delete(l.keys, k.key)
		}
		return
	}
	l.markDirty(k)
}

// promote makes the delayed events whose time came due.
func (l *logRun) promote(now time.Time) {
	for len(l.delayed) > 0 && !l.delayed[0].notBefore.After(now) {
		e := heap.Pop(&l.delayed).(*entry)
		if e.k != nil {
			l.markDirty(e.k)
		} else {
			l.loose = append(l.loose, e)
		}
	}
}

// wakeAt is how long until something timed is due.
func (l *logRun) wakeAt(now time.Time) time.Duration {
	d := time.Hour
	if len(l.delayed) > 0 {
		d = min(d, l.delayed[0].notBefore.Sub(now))
	}
	if (len(l.loose) > 0 || len(l.dirty) > 0) && now.Before(l.pauseUntil) {
		d = min(d, l.pauseUntil.Sub(now))
	}
	if now.Before(l.ackRetry) {
		d = min(d, l.ackRetry.Sub(now))
	}
	return max(d, time.Millisecond)
}

// backoff is the pause after attempt consecutive calls found the broker
// unreachable.
func (l *logRun) backoff(attempt int) time.Duration {
	return jitter(backoff(l.r.cfg.BackoffBase, l.r.cfg.BackoffMax, attempt))
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
