package relay

import (
	"cmp"
	"container/heap"
	"slices"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/relay/internal/dispatch"
)

// enqueue makes a keyless event due, or delayed until its notBefore.
func (l *logRun) enqueue(e *entry, now time.Time) {
	if e.notBefore.After(now) {
		heap.Push(&l.delayed, e)
		return
	}
	l.loose = append(l.loose, e)
}

func (l *logRun) markDirty(k *keyChain) {
	if !k.dirty {
		k.dirty = true
		l.dirty = append(l.dirty, k)
	}
}

// launch hands every event that may go now to a new set, which
// internal/dispatch publishes on its own goroutine.
func (l *logRun) launch(now time.Time) {
	l.gen++
	var es []*entry
	for _, k := range l.dirty {
		k.dirty = false
		es = l.handOut(k, now, es)
	}
	clear(l.dirty)
	l.dirty = l.dirty[:0]
	for _, e := range l.loose {
		e.latch, e.gen = &dispatch.Latch{}, l.gen
		es = append(es, e)
	}
	clear(l.loose)
	l.loose = l.loose[:0]
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
		case p.gen == l.gen:
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
	l.sets++
	go l.runSet(es, evs, latches, prevIn, prev)
}

// handOut appends to es the key's events that may join the next set: from
// the first one in no set, those due, up to a delayed one (it holds its
// key) or one whose predecessor already failed (the key is handed out
// again once that outcome is back). A key's events are in at most two sets
// at once.
func (l *logRun) handOut(k *keyChain, now time.Time, es []*entry) []*entry {
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
				heap.Push(&l.delayed, e)
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
		e.pred, e.latch, e.gen = pred, &dispatch.Latch{}, l.gen
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
func (l *logRun) runSet(es []*entry, evs []outbox.Event, latches []*dispatch.Latch, prevIn []int, prev []dispatch.Ticket) {
	cfg := l.r.cfg
	unavailable := false
	dispatch.Run(dispatch.Set{
		Events:   evs,
		PrevIn:   prevIn,
		Prev:     prev,
		Features: broker.Features{Ordering: l.r.features.Ordering, MaxInFlight: l.callCap()},
		MaxCalls: cfg.Workers,
		NoCut:    true, // a call takes what is ready, up to BatchSize, as it always did
		PublishIdx: func(idx []int, send []outbox.Event) ([]broker.Result, bool) {
			return l.publish(es, idx, send)
		},
		Judge: func(send []outbox.Event, results []broker.Result) []bool {
			// the same judgement settleCall makes of this call's report
			j := l.r.judge(send, results, false)
			ok := make([]bool, len(send))
			for i := range send {
				ok[i] = j.each[i].verdict == confirmed
			}
			unavailable = unavailable || j.unavailable != nil
			return ok
		},
		Stop: func() bool {
			return unavailable || l.ctx.Err() != nil || time.Now().UnixNano() < l.paused.Load()
		},
		Wait: func(wake <-chan struct{}) bool {
			select {
			case <-wake:
				return true
			case <-l.ctx.Done():
				return false
			}
		},
		Settled: func(i int, o dispatch.Outcome) {
			if o == dispatch.Released {
				l.reports.push(report{back: es[i]})
			}
			latches[i].Resolve(o == dispatch.Confirmed)
		},
	})
	l.reports.push(report{setDone: true})
}

// publish runs one publish call once one of the Workers slots is free,
// and reports its results to the loop. sent false: the loop stopped first.
func (l *logRun) publish(es []*entry, idx []int, evs []outbox.Event) ([]broker.Result, bool) {
	select {
	case l.slots <- struct{}{}:
	case <-l.ctx.Done():
		return nil, false
	}
	// A call that waited for its slot looks again: the loop may have
	// stopped, or learned the broker is unreachable, meanwhile (the slot
	// is freed before the loop hears of the call that held it). Its
	// events are released untried, as Stop would have.
	if l.ctx.Err() != nil || time.Now().UnixNano() < l.paused.Load() {
		<-l.slots
		return nil, false
	}
	start := time.Now()
	res, stopped := l.r.publish(l.pub, evs)
	took := time.Since(start)
	if stopped {
		<-l.slots
		return nil, false
	}
	<-l.slots // before the report: the loop, woken by it, finds the slot free
	c := &call{entries: make([]*entry, len(idx)), events: evs, results: res, took: took, cutShort: l.pub.Err() != nil}
	for k, i := range idx {
		c.entries[k] = es[i]
	}
	l.reports.push(report{call: c})
	return res, true
}

// callCap is the most events in one publish call: BatchSize, and no more
// than the broker's in-flight window.
func (l *logRun) callCap() int {
	if n := l.r.features.MaxInFlight; n > 0 {
		return min(n, l.r.cfg.BatchSize)
	}
	return l.r.cfg.BatchSize
}
