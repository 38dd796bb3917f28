package mysqlstore

import (
	"context"
	"time"
)

// Notify returns a channel that receives a value soon after events are
// enqueued through this Store. MySQL has no LISTEN, so this is an in-process
// signal only: other processes' enqueues are found by polling. It is a hint;
// the relay polls anyway.
func (s *Store) Notify(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	s.listeners = append(s.listeners, ch)
	s.mu.Unlock()
	go func() {
		<-ctx.Done()
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, l := range s.listeners {
			if l == ch {
				s.listeners = append(s.listeners[:i], s.listeners[i+1:]...)
				break
			}
		}
	}()
	return ch
}

// signal wakes every in-process listener without blocking.
func (s *Store) signal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.listeners {
		select {
		case l <- struct{}{}:
		default:
		}
	}
}

// txSignalDelay: EnqueueTx cannot see the caller's commit, so besides an
// immediate signal it sends a second one shortly after, when most
// transactions have committed.
const txSignalDelay = 50 * time.Millisecond

func (s *Store) signalAfterTx() {
	s.signal()
	time.AfterFunc(txSignalDelay, s.signal)
}
