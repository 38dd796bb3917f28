package driver

import (
	"context"
	"sync"
)

// Wakeups fans one "events may have been committed" signal out to every
// channel handed out by Subscribe. Stores build their Notifier on it. The
// zero value is ready to use.
type Wakeups struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// Subscribe returns a channel that holds at most one pending wake-up and
// receives them until ctx ends.
func (w *Wakeups) Subscribe(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	if w.subs == nil {
		w.subs = make(map[chan struct{}]struct{})
	}
	w.subs[ch] = struct{}{}
	w.mu.Unlock()
	context.AfterFunc(ctx, func() {
		w.mu.Lock()
		delete(w.subs, ch)
		w.mu.Unlock()
	})
	return ch
}

// Broadcast wakes every subscriber without blocking.
func (w *Wakeups) Broadcast() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Len returns how many subscribers there are.
func (w *Wakeups) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.subs)
}
