package pgstore

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox/store/driver"
)

// Relay sessions (driver.Sessions): how a crash costs a second, not a lease.
//
// Balance opens, for each owner it heartbeats, a connection of its own
// (outside the pool, whose connections come and go) that takes the
// session-level advisory lock (sessionLock, hashtext(owner)) and keeps it
// until Leave or Close, and records that backend's pid in the owner's row
// of <table>_relays. The lock lives exactly as long as the backend: when
// the relay's process dies, the kernel closes its sockets, the backend
// reads end-of-file at once and exits, and the lock is gone from pg_locks.
// A relay's row whose pid no longer holds the lock (sessionAliveSQL) is an
// orphan: the next Balance of any relay ends its membership, its shard
// leases and its claims' leases (reapSQL), then takes the shards as it
// takes expired ones. pg_locks is readable by every role, unlike the
// backend start time in pg_stat_activity, and a recycled pid does not hold
// the lock: a new backend of the same owner (a restart under the same
// name) does, and is alive.
//
// A row without a pid (the session could not be opened, or another
// session holds the owner's lock: two processes under one name) is never
// an orphan: its lease is the bound, as it is for a process that is
// stopped or cut off while its backend lives.

// relaySession is one owner's own connection, holding its lock.
type relaySession struct {
	mu   sync.Mutex // a pgx.Conn is used by one goroutine at a time
	conn *pgx.Conn  // nil once closed or lost
	pid  int32
}

var _ driver.Sessions = (*Store)(nil)

// sessionAliveSQL is the condition that the relays row aliased r is held
// by a live session: its pid holds the owner's advisory lock in this
// database. $K is the lock's first key.
func sessionAliveSQL(k string) string {
	return `EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.pid = r.pid
	AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND l.classid = ` + k + `::int::oid AND l.objid = hashtext(r.owner)::oid AND l.objsubid = 2)`
}

// rebalanceSQL: whether a live relay other than $1 has lost its session,
// or a relay whose session is gone still has a live claim (lateClaimsSQL).
func (s *Store) rebalanceSQL() string {
	return `SELECT EXISTS (SELECT 1 FROM ` + s.relaysTable() + ` r WHERE r.owner <> $1 AND r.lease_until > now() AND r.pid IS NOT NULL
	AND NOT ` + sessionAliveSQL("$2") + `) OR EXISTS (SELECT 1 FROM ` + s.claimsTable() + ` c WHERE ` + s.lateClaimsSQL("$1", "$2") + `)`
}

// lateClaimsSQL is the condition that the claim c is live but its owner,
// other than $owner, has a relays row whose session is gone: a claim the
// dead relay's backend committed after the reap had ended its leases. A
// SIGKILLed relay's batch of statements (BEGIN … COMMIT, sent in one round
// trip) runs to its end on its pool connection while the session's own
// backend is already gone; the claim then held its shards for a whole
// lease, since the shards' next owner skips the shards of others' live
// claims (TestKilledRelaysKeysFlowWithinSeconds failed so, one run in
// three, under load).
func (s *Store) lateClaimsSQL(owner, key string) string {
	return `c.owner <> ` + owner + ` AND c.lease_until > now() AND EXISTS (SELECT 1 FROM ` + s.relaysTable() + ` r WHERE r.owner = c.owner AND r.pid IS NOT NULL
	AND NOT ` + sessionAliveSQL(key) + `)`
}

// reapSQL ends, as of now, the membership of the live relays other than
// $1 whose session is gone ($2: the lock's first key), the leases of
// their shards and those of their claims, and the leases of claims such
// a relay committed after an earlier reap (lateClaimsSQL). Rows a live heartbeat has locked
// are skipped (SKIP LOCKED: that relay is renewing them, so it lives).
// The shards keep their owner and epoch: the take that follows in the
// same transaction finds them expired and moves them on with a new epoch,
// and the dead relay's claims, expired, are deleted by the next claim
// over their shards, as after a lease's end.
func (s *Store) reapSQL() string {
	return `WITH dead AS (
	UPDATE ` + s.relaysTable() + ` d SET lease_until = LEAST(d.lease_until, now()) WHERE d.owner IN (
		SELECT r.owner FROM ` + s.relaysTable() + ` r WHERE r.owner <> $1 AND r.lease_until > now() AND r.pid IS NOT NULL
		AND NOT ` + sessionAliveSQL("$2") + ` FOR UPDATE SKIP LOCKED)
	RETURNING d.owner
), lapsed AS (
	UPDATE ` + s.shardsTable() + ` h SET lease_until = LEAST(h.lease_until, now()) WHERE h.owner IN (SELECT owner FROM dead) RETURNING 1
)
UPDATE ` + s.claimsTable() + ` c SET lease_until = LEAST(c.lease_until, now()) WHERE c.owner IN (SELECT owner FROM dead) OR (` + s.lateClaimsSQL("$1", "$2") + `)`
}

// sessionKey is the first key of the owners' session locks.
func (s *Store) sessionKey() int32 { return int32(driver.LockKey(s.opts, "session")) }

// session returns the pid of owner's own session, opening it (and taking
// its lock) when it has none or lost it; nil when it cannot be had, and
// the owner's lease is then the only bound. A session that died while
// idle is found by a ping: one round trip per heartbeat, off the pool.
func (s *Store) session(ctx context.Context, owner string) *int32 {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	if s.sessions == nil {
		s.sessions = map[string]*relaySession{}
	}
	rs := s.sessions[owner]
	if rs == nil {
		rs = &relaySession{}
		s.sessions[owner] = rs
	}
	s.mu.Unlock()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.conn != nil {
		if err := rs.conn.Ping(ctx); err == nil {
			return &rs.pid
		}
		rs.drop()
	}
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil
	}
	var got bool
	var pid int32
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1::int, hashtext($2::text)), pg_backend_pid()", s.sessionKey(), owner).Scan(&got, &pid); err != nil || !got {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil
	}
	rs.conn, rs.pid = conn, pid
	s.mu.Lock()
	gone := s.closed || s.sessions[owner] != rs // closed, or Left, meanwhile
	s.mu.Unlock()
	if gone {
		rs.drop()
		return nil
	}
	return &rs.pid
}

// drop closes a session's connection (under rs.mu).
func (rs *relaySession) drop() {
	if rs.conn != nil {
		_ = rs.conn.Close(context.Background())
		rs.conn = nil
	}
}

// endSession closes owner's session (after Leave): its lock goes with it.
func (s *Store) endSession(owner string) {
	s.mu.Lock()
	rs := s.sessions[owner]
	delete(s.sessions, owner)
	s.mu.Unlock()
	if rs != nil {
		rs.mu.Lock()
		rs.drop()
		rs.mu.Unlock()
	}
}

// closeSessions closes every session (Close).
func (s *Store) closeSessions() {
	s.mu.Lock()
	all := s.sessions
	s.sessions = nil
	s.mu.Unlock()
	for _, rs := range all {
		rs.mu.Lock()
		rs.drop()
		rs.mu.Unlock()
	}
}

// Rebalance reports whether a live relay other than owner has lost its
// session, or a relay whose session is gone committed a claim after its
// membership was reaped (lateClaimsSQL; see driver.Sessions); a relay
// that joins asks for its share over a notification (BalanceNotify), not
// here. It asks over owner's own session when it has one, which also
// finds that session dead (it is opened again by the next Balance), and
// over the pool otherwise.
func (s *Store) Rebalance(ctx context.Context, owner string) (bool, error) {
	q := s.rebalanceSQL()
	var found bool
	s.mu.Lock()
	rs := s.sessions[owner]
	s.mu.Unlock()
	if rs != nil {
		rs.mu.Lock()
		if rs.conn != nil {
			err := rs.conn.QueryRow(ctx, q, owner, s.sessionKey()).Scan(&found)
			if err == nil {
				rs.mu.Unlock()
				return found, nil
			}
			rs.drop()
		}
		rs.mu.Unlock()
	}
	err := s.pool.QueryRow(ctx, q, owner, s.sessionKey()).Scan(&found)
	return found, wrap("rebalance", err)
}
