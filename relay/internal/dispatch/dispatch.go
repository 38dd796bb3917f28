package dispatch

import (
	"slices"
	"sync"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// Outcome is what became of one event of a Set.
type Outcome int8

const (
	// Pending: no outcome yet (only seen before Run returns it).
	Pending Outcome = iota
	// Confirmed: published, and Judge said ok.
	Confirmed
	// Failed: published, and Judge said not ok (the caller decided what
	// that means: a retry, DEAD, a release).
	Failed
	// Released: never sent (its predecessor failed or was released, or
	// the dispatch stopped first); it was charged no attempt.
	Released
)

// String names the outcome, for tests and logs.
func (o Outcome) String() string {
	switch o {
	case Confirmed:
		return "confirmed"
	case Failed:
		return "failed"
	case Released:
		return "released"
	}
	return "pending"
}

// Ticket is the outcome of an event outside the set (an earlier batch's,
// still in flight) that an event of the set waits for.
type Ticket interface {
	// State reports whether the outcome is known, and whether it was ok
	// (confirmed: the next event of its key may go).
	State() (done, ok bool)
	// Notify makes a non-blocking send on wake once the outcome is known
	// (at once if it is already).
	Notify(wake chan struct{})
}

// Latch is a Ticket resolved once by its owner: the relay's ticket of a
// claimed event embeds one. The zero value is pending.
type Latch struct {
	mu      sync.Mutex
	done    bool
	ok      bool
	waiters []chan struct{}
}

// Resolve records the outcome and tells the waiters. Only the first call
// counts.
func (l *Latch) Resolve(ok bool) {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	l.done, l.ok = true, ok
	ws := l.waiters
	l.waiters = nil
	l.mu.Unlock()
	for _, w := range ws {
		poke(w)
	}
}

// State reports whether the outcome is known, and whether it was ok.
func (l *Latch) State() (done, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done, l.ok
}

// Notify pokes w when the outcome is known (at once if it is).
func (l *Latch) Notify(w chan struct{}) {
	l.mu.Lock()
	if !l.done {
		l.waiters = append(l.waiters, w)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	poke(w)
}

// DefaultMaxCalls is Set.MaxCalls when it is 0. Two calls keep one in
// flight while the other's results are judged and its keys' next events
// sent; more fragment the events that get ready together (measured when
// it was built: with four, calls carried 2.4 events at 10 keys instead of
// 4.9; the run is in the git history of BENCHMARKS.md).
const DefaultMaxCalls = 2

// Set is one set of events to dispatch, and the caller's callbacks.
type Set struct {
	// Events are the events, in their keys' order (id order).
	Events []outbox.Event
	// PrevIn[i] is the index in Events of the event i waits for, or -1.
	// nil: no event waits for another of the set.
	PrevIn []int
	// Prev[i] is the event outside the set that event i waits for, when
	// PrevIn[i] is -1 (nil: none). nil: no event waits outside the set.
	Prev []Ticket
	// Features are the broker's: Ordering (OrderKey or stronger puts a
	// key's later events in one call) and MaxInFlight (the most events in
	// one call; 0: no bound).
	Features broker.Features
	// MaxCalls bounds the calls in flight at once; 0 is DefaultMaxCalls.
	MaxCalls int
	// NoCut keeps the ready events together on a broker that keeps no
	// order: a call found with no call in flight takes every ready event
	// (up to MaxInFlight), not a MaxCalls-th of them.
	NoCut bool

	// Publish runs one publish call and returns one result per event; it
	// may run on its own goroutine, several at once. sent false: nothing
	// was sent (no room before a stop): the events are released and no
	// further call starts.
	Publish func(events []outbox.Event) (results []broker.Result, sent bool)
	// PublishIdx, when set, is used instead of Publish, and is also given
	// the indices in Events of the call's events, in the call's order (it
	// must not change idx).
	PublishIdx func(idx []int, events []outbox.Event) (results []broker.Result, sent bool)
	// Judge sorts one call's results and says per event whether it was
	// confirmed (ok) or failed. It is called on Run's goroutine, one call
	// at a time.
	Judge func(events []outbox.Event, results []broker.Result) (ok []bool)
	// Stop reports whether no further call may start (a stop, a lost
	// lease, an unreachable broker); then everything not sent is given
	// back. nil: never.
	Stop func() bool
	// Wait blocks, when nothing is in flight and events wait only for
	// tickets, until wake is sent on (true) or waiting must end (false:
	// then the dispatch stops). nil: it waits for wake only.
	Wait func(wake <-chan struct{}) bool
	// Settled, when set, is told each event's outcome as soon as it is
	// known (before the events that wait for it move on), on Run's
	// goroutine.
	Settled func(i int, o Outcome)
}

// state of an event during Run
const (
	waiting int8 = iota
	ready
	sending
	confirmed
	failed
)

// Run dispatches s until every event has an outcome, and returns them.
// Calls it started are all done when it returns.
func Run(s Set) []Outcome {
	n := len(s.Events)
	out := make([]Outcome, n)
	if n == 0 {
		return out
	}
	ordered := s.Features.Ordering > 0 // OrderKey or OrderPartition
	mx := s.Features.MaxInFlight
	maxCalls := s.MaxCalls
	if maxCalls <= 0 {
		maxCalls = DefaultMaxCalls
	}
	state := make([]int8, n)
	// first[j] and sibling[i] list the events of the set that wait for
	// event j.
	first := make([]int32, n)
	sibling := make([]int32, n)
	for i := range first {
		first[i], sibling[i] = -1, -1
	}
	wake := make(chan struct{}, 1)
	var queue []int   // ready, not sent yet
	var outside []int // waiting for a ticket
	for i := n - 1; i >= 0; i-- {
		j := -1
		if s.PrevIn != nil {
			j = s.PrevIn[i]
		}
		var p Ticket
		if s.Prev != nil {
			p = s.Prev[i]
		}
		switch {
		case j >= 0:
			sibling[i], first[j] = first[j], int32(i)
		case p != nil:
			outside = append(outside, i)
			p.Notify(wake)
		default:
			state[i] = ready
		}
	}
	slices.Reverse(outside)
	for i := range state {
		if state[i] == ready {
			queue = append(queue, i)
		}
	}
	left := n
	// settle records an event's outcome and moves the events that wait
	// for it on: ready when it was confirmed, released when not.
	var settle func(i int, o Outcome)
	settle = func(i int, o Outcome) {
		left--
		out[i] = o
		ok := o == Confirmed
		if ok {
			state[i] = confirmed
		} else {
			state[i] = failed
		}
		if s.Settled != nil {
			s.Settled(i, o)
		}
		for k := first[i]; k >= 0; k = sibling[k] {
			switch {
			case state[k] != waiting:
			case ok:
				state[k] = ready
				queue = append(queue, int(k))
			default:
				settle(int(k), Released)
			}
		}
	}
	type done struct {
		idx     []int
		send    []outbox.Event
		results []broker.Result
		sent    bool
	}
	publish := func(idx []int, send []outbox.Event) ([]broker.Result, bool) {
		if s.PublishIdx != nil {
			return s.PublishIdx(idx, send)
		}
		return s.Publish(send)
	}
	results := make(chan done, maxCalls)
	inFlight := 0
	stopping := false
	for left > 0 {
		// events waiting for tickets whose outcome is known
		if len(outside) > 0 {
			kept := outside[:0]
			for _, i := range outside {
				if state[i] != waiting {
					continue
				}
				switch done, ok := s.Prev[i].State(); {
				case !done:
					kept = append(kept, i)
				case ok:
					state[i] = ready
					queue = append(queue, i)
				default:
					settle(i, Released)
				}
			}
			outside = kept
		}
		if !stopping && len(queue) > 0 && s.Stop != nil && s.Stop() {
			stopping = true
		}
		if stopping {
			// give back what was not sent
			for i := range state {
				if state[i] == waiting || state[i] == ready {
					settle(i, Released)
				}
			}
			queue = queue[:0]
		}
		for len(queue) > 0 && inFlight < maxCalls {
			slices.Sort(queue)
			take := len(queue)
			if !ordered && !s.NoCut && inFlight == 0 {
				// nothing in flight: cut the ready events into
				// maxCalls calls
				take = (len(queue) + maxCalls - 1) / maxCalls
			}
			if mx > 0 {
				take = min(take, mx)
			}
			idx := slices.Clone(queue[:take])
			queue = append(queue[:0], queue[take:]...)
			for _, i := range idx {
				state[i] = sending
			}
			if ordered {
				// the key's later events of the set go in the same
				// call, after it
				for at := 0; at < len(idx) && (mx <= 0 || len(idx) < mx); at++ {
					for k := first[idx[at]]; k >= 0 && (mx <= 0 || len(idx) < mx); k = sibling[k] {
						if state[k] == waiting {
							state[k] = sending
							idx = append(idx, int(k))
						}
					}
				}
				slices.Sort(idx)
			}
			send := make([]outbox.Event, len(idx))
			for k, i := range idx {
				send[k] = s.Events[i]
			}
			inFlight++
			if inFlight == 1 && len(queue) == 0 && len(outside) == 0 {
				// the only call, and nothing can get ready before it
				// returns: run it here (no goroutine handoff per call,
				// which a hot key would pay per event)
				res, sent := publish(idx, send)
				results <- done{idx: idx, send: send, results: res, sent: sent}
				break
			}
			go func() {
				res, sent := publish(idx, send)
				results <- done{idx: idx, send: send, results: res, sent: sent}
			}()
		}
		if left == 0 {
			break
		}
		var d done
		if inFlight == 0 {
			if stopping {
				break // cannot happen: everything unsent was released
			}
			// every event left waits for a ticket
			if s.Wait == nil {
				<-wake
				continue
			}
			if !s.Wait(wake) {
				stopping = true
			}
			continue
		}
		select {
		case d = <-results:
		case <-wake:
			continue
		}
		inFlight--
		if !d.sent {
			stopping = true
			for _, i := range d.idx {
				settle(i, Released)
			}
			continue
		}
		ok := s.Judge(d.send, d.results)
		for k, i := range d.idx {
			o := Failed
			if k < len(ok) && ok[k] {
				o = Confirmed
			}
			settle(i, o)
		}
	}
	for ; inFlight > 0; inFlight-- {
		// only reached with nothing left to settle: cannot happen
		<-results
	}
	return out
}

// poke sends on w without blocking.
func poke(w chan struct{}) {
	select {
	case w <- struct{}{}:
	default:
	}
}
