package pgstore

import (
	"context"
	"strings"
	"time"

	"github.com/outbox-go/outbox/store/driver"

	"github.com/jackc/pgx/v5"
)

var _ driver.Notifier = (*Store)(nil)

// Notify returns a channel that receives a value soon after events are
// committed: by LISTEN on the table's channel (any process that enqueues with
// notifications on), and at once after Enqueue through this Store. It is a
// hint only: each Store notifies at most once per Config.NotifyInterval, so
// one wake-up may stand for several commits, the later of which may land
// shortly after it; the relay looks again soon after a wake-up, and polls.
// The listener reconnects by itself; while it cannot listen (a PgBouncer in
// transaction mode, say) the relay simply keeps polling.
func (s *Store) Notify(ctx context.Context) <-chan struct{} {
	ch := s.wakeups.Subscribe(ctx)
	s.startListening()
	return ch
}

// startListening starts the listener and the commit probe once.
func (s *Store) startListening() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.listening && !s.closed {
		s.listening = true
		lctx, cancel := context.WithCancel(context.Background())
		s.stopListen, s.listenDone = cancel, make(chan struct{})
		go s.listen(lctx)
		if s.probeEvery > 0 {
			s.background.Add(1)
			go s.probe(lctx)
		}
	}
}

// writersEvery is how often the commit probe lists the table's writers
// (see probe). A look costs PostgreSQL about 0.3 ms (it copies the lock
// table), too much for every probeEvery.
const writersEvery = 50 * time.Millisecond

// writersSQL lists the transactions (virtual ids) that hold or
// wait for a write lock on table $1: producers between their INSERT and
// their commit, and relays' own claims and acks, whose end wakes the relay
// for nothing only when a look falls inside one of their few milliseconds.
const writersSQL = `SELECT ARRAY(SELECT virtualtransaction FROM pg_locks
WHERE locktype = 'relation' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
AND relation = $1::text::regclass AND mode = 'RowExclusiveLock')`

// writerEnded says whether a transaction in before (sorted) is not in now
// (sorted): it ended since the last look.
func writerEnded(before, now []string) bool {
	j := 0
	for _, v := range before {
		for j < len(now) && now[j] < v {
			j++
		}
		if j == len(now) || now[j] != v {
			return true
		}
	}
	return false
}

// restartSQL reads the last value of table $1's id sequence: NULL before
// its first use, for a column with no owned sequence, and for a role
// without the privilege to read it (the probe then does without this
// check; inserting needs no such privilege, so relay roles often lack it).
const restartSQL = `SELECT CASE WHEN has_sequence_privilege(q.s, 'SELECT, USAGE') THEN pg_sequence_last_value(q.s::regclass) END
FROM (SELECT pg_get_serial_sequence($1, 'id') AS s) q`

// signal wakes every in-process listener without blocking.
func (s *Store) signal() { s.wakeups.Broadcast() }

// wake notifies other processes too (after a requeue, say).
func (s *Store) wake(ctx context.Context) {
	s.signal()
	if s.notify {
		_, _ = s.pool.Exec(ctx, "SELECT pg_notify($1, '')", s.channel)
	}
}

func (s *Store) listen(ctx context.Context) {
	defer close(s.listenDone)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		_ = err // the relay polls meanwhile; reconnect after a pause
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (s *Store) listenOnce(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection is in LISTEN state: never hand it back to the pool.
	pc := conn.Hijack()
	defer pc.Close(context.Background())
	if _, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		return err
	}
	s.signal() // events may have arrived while we were not listening
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Payload == balancePayload {
			s.rebalance.Broadcast()
			continue
		}
		if p, ok := strings.CutPrefix(n.Payload, probePrefix); ok && s.heard(p) {
			continue
		}
		s.signal()
	}
}
