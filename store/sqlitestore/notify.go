package sqlitestore

import (
	"context"
	"database/sql"

	"github.com/outbox-go/outbox/store/driver"
)

var (
	_ driver.Notifier = (*Store)(nil)
	_ driver.Watcher  = (*Store)(nil)
)

// Watching reports whether the data_version watcher runs while Notify's
// channels are open (driver.Watcher): then every commit wakes the relay.
func (s *Store) Watching() bool { return s.opts.ProbeInterval > 0 }

// Notify returns a channel that receives a value soon after events may have
// been committed. SQLite has no LISTEN, so two sources feed it: Enqueue and
// RequeueDead of this Store signal as soon as they commit, and while any
// channel is open a watcher asks SQLite every Options.ProbeInterval (1 ms
// by default while commits arrive, 5 ms once none has for a second) for
// PRAGMA data_version, which changes when any other connection commits to the
// file: a caller's transaction that used EnqueueTx, another process, a
// producer's plain INSERT. That costs one trivial query per tick on one
// connection of its own and never the write lock. A hint only: the relay
// keeps polling. The channel holds at most one pending signal and stops
// receiving once ctx is done.
func (s *Store) Notify(ctx context.Context) <-chan struct{} {
	ch := s.wakeups.Subscribe(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.watching && !s.closed && s.opts.ProbeInterval > 0 {
		s.watching = true
		wctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		s.stopWatch, s.watchDone = cancel, done
		go s.watch(wctx, done)
	}
	return ch
}

// signal wakes every listener without blocking.
func (s *Store) signal() { s.wakeups.Broadcast() }

// watch polls PRAGMA data_version (per connection, so on a connection of
// its own) until no listener is left or the Store closes.
func (s *Store) watch(ctx context.Context, done chan struct{}) {
	defer close(done)
	var conn *sql.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	last := int64(-1)
	pace := driver.NewProbePace(s.opts.ProbeInterval)
	defer pace.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-pace.C():
		}
		pace.Looked()
		s.mu.Lock()
		if s.wakeups.Len() == 0 {
			s.watching = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if conn == nil {
			c, err := s.db.Conn(ctx)
			if err != nil {
				continue // the relay polls meanwhile
			}
			conn, last = c, -1
		}
		var v int64
		if err := conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&v); err != nil {
			conn.Close()
			conn = nil
			continue
		}
		if v != last {
			// The first read after (re)connecting signals too: commits
			// may have happened while nobody watched.
			last = v
			s.signal()
			pace.Found()
		}
	}
}
