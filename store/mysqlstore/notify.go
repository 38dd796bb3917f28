package mysqlstore

import (
	"context"
	"time"
)

// watcher is the state of the probe that Notify starts (guarded by
// Store.mu).
type watcher struct {
	every   time.Duration // <0: off
	running bool
	stop    context.CancelFunc
	done    chan struct{}
}

// Notify returns a channel that receives a value soon after events may have
// been committed. MySQL has no LISTEN, so two sources feed it: Enqueue and
// RequeueDead of this Store signal as soon as they commit, and while any
// channel is open a probe asks the table every Options.ProbeInterval for its newest
// id, which changes when anyone commits an event: another process, a
// caller's transaction that used EnqueueTx, a producer's plain INSERT. The
// probe reads only the end of the primary key (MySQL answers MAX(id) from
// the index without reading rows), so its cost does not grow with the
// backlog. It can miss a commit whose id is below one already seen (ids
// commit out of order); the relay looks again shortly after each wake-up
// and polls, so that costs latency, never an event. The channel holds at
// most one pending signal and stops receiving once ctx is done.
func (s *Store) Notify(ctx context.Context) <-chan struct{} {
	ch := s.wakeups.Subscribe(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watch.every > 0 && !s.watch.running && !s.closed {
		s.watch.running = true
		wctx, cancel := context.WithCancel(context.Background())
		s.watch.stop, s.watch.done = cancel, make(chan struct{})
		go s.probe(wctx, s.watch.done)
	}
	return ch
}

// probe signals whenever the table's newest id grows, until ctx ends or no
// listener is left.
func (s *Store) probe(ctx context.Context, done chan struct{}) {
	defer close(done)
	q := "SELECT COALESCE(MAX(id), 0) FROM " + s.table
	last := int64(-1)
	t := time.NewTicker(s.watch.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		if s.wakeups.Len() == 0 {
			s.watch.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		var newest int64
		if err := s.db.QueryRowContext(ctx, q).Scan(&newest); err != nil {
			continue // the relay polls meanwhile
		}
		if last >= 0 && newest > last {
			s.signal()
		}
		last = newest
	}
}

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
