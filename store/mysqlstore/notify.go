package mysqlstore

import (
	"context"
	"strconv"
	"time"

	"github.com/outbox-go/outbox/store/driver"
)

// watcher is the state of the probe that Notify starts (guarded by
// Store.mu).
type watcher struct {
	every   time.Duration // <0: off
	running bool
	stop    context.CancelFunc
	done    chan struct{}
}

var (
	_ driver.Notifier = (*Store)(nil)
	_ driver.Watcher  = (*Store)(nil)
)

// Watching reports whether the commit probe runs while Notify's channels are
// open (driver.Watcher): then every commit wakes the relay.
func (s *Store) Watching() bool { return s.watch.every > 0 }

// Notify returns a channel that receives a value soon after events may have
// been committed. MySQL has no LISTEN, so two sources feed it: Enqueue and
// RequeueDead of this Store signal as soon as they commit, and while any
// channel is open a probe asks the table every Options.ProbeInterval for its newest
// id, which changes when anyone commits an event: another process, a
// caller's transaction that used EnqueueTx, a producer's plain INSERT. The
// probe reads only the end of the primary key (MySQL answers MAX(id) from
// the index without reading rows), so its cost does not grow with the
// backlog. A commit whose id is below one already seen (ids commit out of
// order) changes no newest id: the probe's look at the pending rows finds
// it (see probe), and the relay polls anyway, so a miss costs latency,
// never an event. The channel holds at
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
// listener is left. Ids are drawn at INSERT and committed out of order, so
// a commit can land below an id already seen (a producer's transaction
// that took its id first and committed later), where no newest id
// changes; every pendingEvery the probe also reads a signature of the
// pending rows (pendingSQL: how many there are and the sum of their ids,
// over at most pendingCap of them, from the hold index alone) and signals
// when it changed. A late commit is found within that while fewer than
// pendingCap rows are pending, which is when the relay is idle: with more,
// the relay's claims come back full and it keeps claiming, or they are
// rows that wait (a retry's backoff, a key held by a DEAD event), and the
// relay's poll finds the commit.
func (s *Store) probe(ctx context.Context, done chan struct{}) {
	defer close(done)
	q := "SELECT COALESCE(MAX(id), 0) FROM " + s.table
	pq := s.pendingSQL()
	last := int64(-1)
	var sig [2]int64
	sigRead := false
	var pendingAt time.Time
	pace := driver.NewProbePace(s.watch.every)
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
			pace.Found()
		}
		last = newest
		if time.Since(pendingAt) < pendingEvery {
			continue
		}
		pendingAt = time.Now()
		var now [2]int64
		if err := s.db.QueryRowContext(ctx, pq).Scan(&now[0], &now[1]); err != nil {
			continue
		}
		if sigRead && now != sig && now[0] > 0 {
			// (no pace.Found: the relays' own acks change it too,
			// and a drain would keep the fast pace)
			s.signal() // (pending rows all gone is no news)
		}
		sig, sigRead = now, true
	}
}

// pendingEvery is how often the probe reads the pending rows' signature,
// and pendingCap the most pending rows it reads (see probe).
const (
	pendingEvery = 50 * time.Millisecond
	pendingCap   = 1000
)

// pendingSQL returns the count and the id sum of at most pendingCap
// pending rows, read from the hold index (status first; InnoDB keeps the
// primary key in it), so not one row is read.
func (s *Store) pendingSQL() string {
	return "SELECT COUNT(*), COALESCE(SUM(id), 0) FROM (SELECT id FROM " + s.table + s.forceHoldIdx() +
		" WHERE status = 'NEW' LIMIT " + strconv.Itoa(pendingCap) + ") q"
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
