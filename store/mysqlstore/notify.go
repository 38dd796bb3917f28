package mysqlstore

import (
	"context"
	"time"
)

// Notify returns a channel that receives a value soon after events are
// enqueued through this Store. MySQL has no LISTEN, so this is an in-process
// signal only: other processes' enqueues are found by polling. It is a hint;
// the relay polls anyway.
func (s *Store) Notify(ctx context.Context) <-chan struct{} { return s.wakeups.Subscribe(ctx) }

// signal wakes every in-process listener without blocking.
func (s *Store) signal() { s.wakeups.Broadcast() }

// txSignalDelay: EnqueueTx cannot see the caller's commit, so besides an
// immediate signal it sends a second one shortly after, when most
// transactions have committed.
const txSignalDelay = 50 * time.Millisecond

func (s *Store) signalAfterTx() {
	s.signal()
	time.AfterFunc(txSignalDelay, s.signal)
}
