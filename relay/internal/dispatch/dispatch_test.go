package dispatch

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// events makes one event per key given ("" is keyless), ids 1.., and the
// in-set predecessors: each keyed event waits for the previous one of its
// key.
func events(keys ...string) ([]outbox.Event, []int) {
	evs := make([]outbox.Event, len(keys))
	prevIn := make([]int, len(keys))
	last := map[string]int{}
	for i, k := range keys {
		evs[i] = outbox.Event{ID: int64(i + 1), Message: outbox.Message{Key: k}}
		prevIn[i] = -1
		if k == "" {
			continue
		}
		if j, ok := last[k]; ok {
			prevIn[i] = j
		}
		last[k] = i
	}
	return evs, prevIn
}

// recorder is a broker stand-in: it records each call's ids and fails the
// ids in fail.
type recorder struct {
	mu    sync.Mutex
	calls [][]int64
	fail  map[int64]bool
	delay time.Duration
}

func (r *recorder) publish(evs []outbox.Event) ([]broker.Result, bool) {
	if r.delay > 0 {
		time.Sleep(r.delay)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []int64
	res := make([]broker.Result, len(evs))
	for i, e := range evs {
		ids = append(ids, e.ID)
		if r.fail[e.ID] {
			res[i].Err = errors.New("nope")
		}
	}
	r.calls = append(r.calls, ids)
	return res, true
}

// sent returns every id published, in call order.
func (r *recorder) sent() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int64
	for _, c := range r.calls {
		out = append(out, c...)
	}
	return out
}

func judge(_ []outbox.Event, res []broker.Result) []bool {
	ok := make([]bool, len(res))
	for i, r := range res {
		ok[i] = r.Err == nil
	}
	return ok
}

// before reports whether id a was published in an earlier call than b.
func before(calls [][]int64, a, b int64) bool {
	ca, cb := -1, -1
	for i, c := range calls {
		if slices.Contains(c, a) {
			ca = i
		}
		if slices.Contains(c, b) {
			cb = i
		}
	}
	return ca >= 0 && cb >= 0 && ca < cb
}

func TestOrderInsideTheSet(t *testing.T) {
	evs, prevIn := events("a", "b", "a", "", "a", "b")
	r := &recorder{}
	out := Run(Set{Events: evs, PrevIn: prevIn, Publish: r.publish, Judge: judge})
	for i, o := range out {
		if o != Confirmed {
			t.Errorf("event %d: %v, want confirmed", i+1, o)
		}
	}
	if got := r.sent(); len(got) != len(evs) {
		t.Fatalf("published %v, want each event once", got)
	}
	// a: 1, 3, 5; b: 2, 6; each after the previous one returned
	for _, p := range [][2]int64{{1, 3}, {3, 5}, {2, 6}} {
		if !before(r.calls, p[0], p[1]) {
			t.Errorf("calls %v: event %d not published in a call after %d's", r.calls, p[1], p[0])
		}
	}
}

func TestNoOrderBrokerCutsTheReadySetInTwo(t *testing.T) {
	evs, prevIn := events("a", "b", "c", "d")
	r := &recorder{}
	Run(Set{Events: evs, PrevIn: prevIn, Publish: r.publish, Judge: judge})
	if fmt.Sprint(r.calls) != "[[1 2] [3 4]]" && fmt.Sprint(r.calls) != "[[3 4] [1 2]]" {
		t.Errorf("calls %v, want the four ready events cut into two calls", r.calls)
	}
}

func TestPredecessorOutsideTheSet(t *testing.T) {
	evs, prevIn := events("a", "a", "b", "c")
	ta, tc := &Latch{}, &Latch{}
	prev := []Ticket{ta, nil, nil, tc} // a#1 waits for a; c#1 for c
	r := &recorder{}
	var mu sync.Mutex
	var told []string
	resultCh := make(chan []Outcome)
	go func() {
		resultCh <- Run(Set{Events: evs, PrevIn: prevIn, Prev: prev, Publish: r.publish, Judge: judge,
			Settled: func(i int, o Outcome) {
				mu.Lock()
				told = append(told, fmt.Sprintf("%d:%v", i+1, o))
				mu.Unlock()
			}})
	}()
	time.Sleep(50 * time.Millisecond)
	if got := r.sent(); fmt.Sprint(got) != "[3]" {
		t.Errorf("before the tickets resolved, published %v, want only b's event 3", got)
	}
	ta.Resolve(true)  // a's earlier event confirmed: a#1, then a#2 go
	tc.Resolve(false) // c's failed: c#1 is released untried
	var out []Outcome
	select {
	case out = <-resultCh:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its tickets resolved")
	}
	want := []Outcome{Confirmed, Confirmed, Confirmed, Released}
	if !slices.Equal(out, want) {
		t.Errorf("outcomes %v, want %v", out, want)
	}
	if slices.Contains(r.sent(), 4) {
		t.Error("event 4 was published behind a failed ticket")
	}
	if !before(r.calls, 1, 2) {
		t.Errorf("calls %v: a#2 not after a#1", r.calls)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 4 {
		t.Errorf("Settled told %v, want every outcome once", told)
	}
}

func TestGiveBackChain(t *testing.T) {
	evs, prevIn := events("a", "b", "a", "a", "b")
	r := &recorder{fail: map[int64]bool{1: true}}
	var order []int
	out := Run(Set{Events: evs, PrevIn: prevIn, Publish: r.publish, Judge: judge,
		Settled: func(i int, o Outcome) { order = append(order, i) }})
	want := []Outcome{Failed, Confirmed, Released, Released, Confirmed}
	if !slices.Equal(out, want) {
		t.Errorf("outcomes %v, want %v", out, want)
	}
	for _, id := range r.sent() {
		if id == 3 || id == 4 {
			t.Errorf("calls %v: a's event %d was published behind a's failed event 1", r.calls, id)
		}
	}
	// a failed event is told before the events released behind it
	if i, j := slices.Index(order, 0), slices.Index(order, 2); i < 0 || j < i {
		t.Errorf("settled order %v: event 3 released before event 1 failed", order)
	}
}

func TestKeyOrderedBrokerGetsAKeysEventsInOneCall(t *testing.T) {
	evs, prevIn := events("a", "b", "a", "a", "b", "")
	r := &recorder{}
	out := Run(Set{Events: evs, PrevIn: prevIn, Features: broker.Features{Ordering: broker.OrderKey},
		Publish: r.publish, Judge: judge})
	if fmt.Sprint(r.calls) != "[[1 2 3 4 5 6]]" {
		t.Errorf("calls %v, want one call with every event in id order", r.calls)
	}
	for i, o := range out {
		if o != Confirmed {
			t.Errorf("event %d: %v", i+1, o)
		}
	}
	// with MaxInFlight 2: a key's later events fill the call after it
	r = &recorder{}
	Run(Set{Events: evs, PrevIn: prevIn, Features: broker.Features{Ordering: broker.OrderKey, MaxInFlight: 2},
		Publish: r.publish, Judge: judge})
	for _, c := range r.calls {
		if len(c) > 2 {
			t.Errorf("calls %v: one carries more than MaxInFlight 2", r.calls)
		}
	}
	for _, p := range [][2]int64{{1, 4}, {2, 5}} {
		if !before(r.calls, p[0], p[1]) {
			t.Errorf("calls %v: %d not after %d", r.calls, p[1], p[0])
		}
	}
	if len(r.sent()) != len(evs) {
		t.Errorf("calls %v: want every event once", r.calls)
	}
}

func TestMaxInFlightCutsCalls(t *testing.T) {
	evs, prevIn := events("a", "b", "c", "d", "e", "f", "g", "", "")
	r := &recorder{delay: 5 * time.Millisecond}
	Run(Set{Events: evs, PrevIn: prevIn, Features: broker.Features{MaxInFlight: 2}, Publish: r.publish, Judge: judge})
	for _, c := range r.calls {
		if len(c) > 2 {
			t.Errorf("calls %v: one carries more than MaxInFlight 2", r.calls)
		}
	}
	got := r.sent()
	slices.Sort(got)
	if len(got) != len(evs) || got[0] != 1 || got[len(got)-1] != int64(len(evs)) {
		t.Errorf("published %v, want each event once", got)
	}
}

func TestMaxCallsInFlight(t *testing.T) {
	evs, prevIn := events("a", "b", "c", "d", "e", "f")
	var mu sync.Mutex
	now, peak := 0, 0
	pub := func(evs []outbox.Event) ([]broker.Result, bool) {
		mu.Lock()
		now++
		peak = max(peak, now)
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		now--
		mu.Unlock()
		return make([]broker.Result, len(evs)), true
	}
	Run(Set{Events: evs, PrevIn: prevIn, Features: broker.Features{MaxInFlight: 1}, Publish: pub, Judge: judge})
	if peak != DefaultMaxCalls {
		t.Errorf("%d calls in flight at once, want %d", peak, DefaultMaxCalls)
	}
}

func TestStopGivesBackWhatWasNotSent(t *testing.T) {
	evs, prevIn := events("a", "a", "a", "b")
	r := &recorder{}
	calls := 0
	out := Run(Set{Events: evs, PrevIn: prevIn, Publish: r.publish, Judge: judge,
		Features: broker.Features{MaxInFlight: 1}, MaxCalls: 1,
		Stop: func() bool { calls++; return calls > 1 }})
	if len(r.calls) != 1 || fmt.Sprint(r.calls[0]) != "[1]" {
		t.Errorf("calls %v, want only the first", r.calls)
	}
	want := []Outcome{Confirmed, Released, Released, Released}
	if !slices.Equal(out, want) {
		t.Errorf("outcomes %v, want %v", out, want)
	}
}

func TestUnsentCallStopsTheDispatch(t *testing.T) {
	evs, prevIn := events("a", "a", "b")
	published := 0
	out := Run(Set{Events: evs, PrevIn: prevIn, Publish: func(evs []outbox.Event) ([]broker.Result, bool) {
		published++
		return nil, false // no room before a stop
	}, Judge: judge, MaxCalls: 1})
	if published != 1 {
		t.Errorf("%d calls after one sent nothing, want 1", published)
	}
	for i, o := range out {
		if o != Released {
			t.Errorf("event %d: %v, want released", i+1, o)
		}
	}
}

func TestWaitThatEndsGivesBackTheWaiting(t *testing.T) {
	evs, prevIn := events("a", "a", "b")
	r := &recorder{}
	out := Run(Set{Events: evs, PrevIn: prevIn, Prev: []Ticket{&Latch{}, nil, nil}, Publish: r.publish, Judge: judge,
		Wait: func(<-chan struct{}) bool { return false }})
	want := []Outcome{Released, Released, Confirmed}
	if !slices.Equal(out, want) {
		t.Errorf("outcomes %v, want %v", out, want)
	}
	if fmt.Sprint(r.sent()) != "[3]" {
		t.Errorf("published %v, want only b's event", r.sent())
	}
}

func TestNoCutKeepsTheReadySetInOneCall(t *testing.T) {
	evs, prevIn := events("a", "b", "c", "d", "a")
	r := &recorder{}
	Run(Set{Events: evs, PrevIn: prevIn, NoCut: true, Publish: r.publish, Judge: judge})
	if fmt.Sprint(r.calls) != "[[1 2 3 4] [5]]" {
		t.Errorf("calls %v, want the four ready events in one call, then a's next", r.calls)
	}
	// MaxInFlight still bounds a call
	r = &recorder{}
	Run(Set{Events: evs, PrevIn: prevIn, NoCut: true, Features: broker.Features{MaxInFlight: 3}, Publish: r.publish, Judge: judge})
	for _, c := range r.calls {
		if len(c) > 3 {
			t.Errorf("calls %v: one carries more than MaxInFlight 3", r.calls)
		}
	}
}

func TestPublishIdxIsToldTheIndices(t *testing.T) {
	evs, prevIn := events("a", "b", "a", "", "b")
	var mu sync.Mutex
	bad := 0
	seen := map[int]int{}
	out := Run(Set{Events: evs, PrevIn: prevIn, Features: broker.Features{Ordering: broker.OrderKey, MaxInFlight: 2},
		PublishIdx: func(idx []int, send []outbox.Event) ([]broker.Result, bool) {
			mu.Lock()
			defer mu.Unlock()
			if len(idx) != len(send) {
				bad++
			}
			for k, i := range idx {
				seen[i]++
				if k >= len(send) || send[k].ID != evs[i].ID {
					bad++
				}
			}
			return make([]broker.Result, len(send)), true
		}, Judge: judge})
	if bad != 0 {
		t.Errorf("%d indices did not match the call's events", bad)
	}
	for i, o := range out {
		if o != Confirmed || seen[i] != 1 {
			t.Errorf("event %d: %v, in %d calls, want confirmed in one", i+1, o, seen[i])
		}
	}
}
