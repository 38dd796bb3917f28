package pgstore

import (
	"context"
	"slices"
	"time"

	"github.com/outbox-go/outbox/store/driver"

	"github.com/jackc/pgx/v5"
)

var (
	_ driver.Notifier = (*Store)(nil)
	_ driver.Watcher  = (*Store)(nil)
)

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

// probe signals soon after events are committed, until ctx ends. It finds
// the commits of producers that send no notification (plain SQL), which
// LISTEN never hears of. Every probeEvery (paced by driver.ProbePace:
// slower while it finds no new id) it asks for an id above the
// newest it has seen (probeSQL: it reads only the rows inserted since, so
// its cost grows neither with the backlog nor with the rows deleted since
// the last VACUUM). Ids are drawn at INSERT and committed out of order, so
// a commit can land below an id already seen, and below rows that stay in
// the table (DEAD, waiting for a retry, held behind their key), so that no
// max over the table changes either. The relay's look again shortly after
// each wake-up covers a commit landing within milliseconds of the other;
// for the rest, every writersEvery the probe lists the transactions that
// hold a write lock on the table (writersSQL, from pg_locks: an INSERT
// holds one until its transaction ends) and signals when one it saw
// before is gone: it committed (or rolled back, a wake-up for nothing).
// So a producer's transaction that was open at one of those looks is
// found within writersEvery of its commit, wherever its id lies; one that
// began and committed between two looks, below an id already seen, is
// found by the relay's poll. Where pg_locks cannot be read, the probe
// reads the table's newest id instead (fullProbeSQL) and signals when it
// changed. Once a second it checks the id sequence for a restart
// (TRUNCATE … RESTART IDENTITY), after which nothing would be above the
// newest seen.
func (s *Store) probe(ctx context.Context) {
	defer s.background.Done()
	q, full := s.probeSQL(), s.fullProbeSQL()
	last, lastFull := int64(-1), int64(-1)
	var writers []string // the write-lock holders seen at the last look; nil before the first
	lastSeq := int64(-1) // the id sequence at the last restart check
	var restartAt, writersAt time.Time
	pace := driver.NewProbePace(s.probeEvery)
	defer pace.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-pace.C():
		}
		pace.Looked()
		if time.Since(restartAt) >= time.Second && (restartAt.IsZero() || last > 0) {
			restartAt = time.Now()
			// A restart sets the sequence back below the newest id
			// seen. Ids above the sequence (a row inserted with an
			// explicit id, a copy without setval) are no restart: once
			// the sequence has been read, only its going back is.
			var seq *int64
			if err := s.pool.QueryRow(ctx, restartSQL, s.table).Scan(&seq); err == nil && seq != nil {
				if last > 0 && *seq < last && (lastSeq < 0 || *seq < lastSeq) {
					last = 0
				}
				lastSeq = *seq
			}
		}
		var newest int64
		if err := s.pool.QueryRow(ctx, q, last).Scan(&newest); err != nil {
			continue // the relay polls meanwhile
		}
		if newest > last {
			if last >= 0 {
				s.signal()
				pace.Found()
			}
			last = newest
		}
		if s.draining() {
			// a relay of this Store claims full batches (a backlog):
			// its probe's looks cost the drain and wake no one
			pace.Hold()
		}
		if time.Since(writersAt) >= writersEvery {
			writersAt = time.Now()
			var now []string
			if err := s.pool.QueryRow(ctx, writersSQL, s.table, int64(uint32(int32(s.claimLock)))).Scan(&now); err == nil {
				slices.Sort(now)
				if writerEnded(writers, now) {
					// (no pace.Found: the relays' own acks end
					// too, and a drain would keep the fast pace)
					s.signal()
				}
				writers = now
				continue
			}
			var top int64
			if err := s.pool.QueryRow(ctx, full).Scan(&top); err != nil {
				continue
			}
			if lastFull >= 0 && top != lastFull && top > 0 {
				s.signal() // (a table drained empty is no news)
			}
			lastFull = top
		}
	}
}

// draining reports whether a relay of this Store took at least half a
// batch with its last claim (busyOwners).
func (s *Store) draining() bool {
	busy := false
	s.busyOwners.Range(func(any, any) bool { busy = true; return false })
	return busy
}

// Watching reports whether the commit probe runs while Notify's channels
// are open (driver.Watcher): then every commit wakes the relay.
func (s *Store) Watching() bool { return s.probeEvery > 0 }

// writersEvery is how often the commit probe lists the table's writers
// (see probe). A look costs PostgreSQL about 0.3 ms (it copies the lock
// table), too much for every probeEvery.
const writersEvery = 50 * time.Millisecond

// writersSQL lists the transactions (virtual ids) that hold or
// wait for a write lock on table $1: producers between their INSERT and
// their commit, and relays' acks, whose end wakes the relay for nothing
// only when a look falls inside one of their few milliseconds. Claims are
// left out (they hold the claim lock, $2, an advisory lock on two int4
// keys, so objsubid 2): a claim takes the table's write lock too, and
// when a look fell inside one, the claim its end woke could be caught by
// the next look, and so on, a relay waking itself for nothing. The lock
// table is read once (MATERIALIZED): pg_locks copies it at each read.
const writersSQL = `SELECT ARRAY(WITH l AS MATERIALIZED (
	SELECT locktype, database, relation, mode, classid, objsubid, virtualtransaction FROM pg_locks WHERE locktype IN ('relation', 'advisory'))
SELECT w.virtualtransaction FROM l w
WHERE w.locktype = 'relation' AND w.database = (SELECT oid FROM pg_database WHERE datname = current_database())
AND w.relation = $1::text::regclass AND w.mode = 'RowExclusiveLock'
AND NOT EXISTS (SELECT 1 FROM l c WHERE c.locktype = 'advisory' AND c.classid = $2::bigint::oid AND c.objsubid = 2 AND c.virtualtransaction = w.virtualtransaction))`

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

// probeSQL returns the newest id above $1 ($1 itself, or 0, when there is
// none). A max over the whole index walks, when the table is empty (a
// relay that keeps up), backwards over every row deleted since the last
// VACUUM, each a heap fetch (measured at a steady 1,000 events/s: 8,700 of
// them, 2 ms, every 5 ms in each relay); above the newest id seen there
// are only the rows inserted since.
func (s *Store) probeSQL() string {
	return "SELECT COALESCE(max(id), GREATEST($1::bigint, 0)) FROM " + s.table + " WHERE id > $1"
}

// fullProbeSQL returns the table's newest id (0 when it is empty): the
// walk probeSQL avoids, made every writersEvery only, and only where
// writersSQL fails.
func (s *Store) fullProbeSQL() string {
	return "SELECT COALESCE(max(id), 0) FROM " + s.table
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
		s.signal()
	}
}
