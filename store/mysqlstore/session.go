package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strconv"
	"strings"
	"sync"

	storedriver "github.com/outbox-go/outbox/store/driver"
)

// Relay sessions (driver.Sessions): how a crash costs a second, not a lease.
//
// Balance takes, for each owner it heartbeats, a GET_LOCK named after the
// table and the owner (sessionLockSQL) on a connection of its own, held
// until Leave or Close, and records that connection's id in the owner's
// row of <table>_relays (conn). A named lock lives exactly as long as its
// connection: when the relay's process dies, the kernel closes its
// sockets, the server ends the connection and the lock is free.
// IS_USED_LOCK needs no privilege (the processlist shows other users'
// connections only with PROCESS), and connection ids are not reused while
// the server runs. A relay's row whose lock is no longer held by its
// connection is an orphan: the next Balance of any relay ends its
// membership (which is the lease of its shards) and the leases of its
// in-flight rows, then takes its shards as it takes expired ones.
//
// A row without a connection id (the lock could not be had: another
// connection holds it, two processes under one name) is never an orphan:
// its lease is the bound, as it is for a process that is stopped or cut
// off while its connection lives.

// relaySession is one owner's own connection, holding its lock.
type relaySession struct {
	mu   sync.Mutex // a sql.Conn runs one statement at a time
	conn *sql.Conn  // nil once closed or lost
	id   int64
}

var _ storedriver.Sessions = (*Store)(nil)

// sessionLockSQL is the name of owner's session lock, for the owner
// expression owner: as lockName with purpose "session/" + owner; its
// parameters are schema (or NULL) and table.
func sessionLockSQL(owner string) string {
	return strings.Replace(lockName, ", ?)))", ", CONCAT('session/', "+owner+"))))", 1)
}

// orphanedSQL is the condition that the relays row r is a live relay
// other than the owner ? whose session is gone. Parameters: schema,
// table, owner.
func (s *Store) orphanedSQL() string {
	return "NOT (IS_USED_LOCK(" + sessionLockSQL("r.owner") + ") <=> r.conn) AND r.owner <> ? AND r.conn IS NOT NULL AND r.lease_until > " + dbNow
}

// session returns the connection id of owner's own session, opening it
// (and taking its lock) when it has none or lost it; nil when it cannot be
// had, and the owner's lease is then the only bound.
func (s *Store) session(ctx context.Context, owner string) *int64 {
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
		if err := rs.conn.PingContext(ctx); err == nil {
			return &rs.id
		}
		rs.drop()
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil
	}
	var got sql.NullInt64
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK("+sessionLockSQL("?")+", 0), CONNECTION_ID()", s.schema, s.opts.Table, owner).Scan(&got, &id); err != nil || got.Int64 != 1 {
		discardConn(conn)
		return nil
	}
	rs.conn, rs.id = conn, id
	s.mu.Lock()
	gone := s.closed || s.sessions[owner] != rs // closed, or Left, meanwhile
	s.mu.Unlock()
	if gone {
		rs.drop()
		return nil
	}
	return &rs.id
}

// discardConn closes a connection instead of pooling it: a pooled
// connection must never hold a session lock.
func discardConn(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// drop closes a session's connection (under rs.mu), and its lock with it.
func (rs *relaySession) drop() {
	if rs.conn != nil {
		discardConn(rs.conn)
		rs.conn = nil
	}
}

// endSession closes owner's session (after Leave).
func (s *Store) endSession(owner string) {
	s.busyOwners.Delete(owner)
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
	s.busyOwners.Clear()
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

// Rebalance reports whether owner's Balance now would move shards on
// (see storedriver.Sessions): a live relay other than owner has lost its
// session, or owner holds more than its share while another live relay
// holds less than the smallest share. MariaDB has no LISTEN to carry a
// joining relay's request for its share (pgstore's BalanceNotify), so the
// relays that hold too much find it here, in the read they already make
// every half second, and the joiner holds its share within about a second
// instead of after their next heartbeat (LeaseFor/3). Shares are Balance's:
// the table's shards over the live relays, one more for the first
// shards-mod-relays of them in byte order. It asks over owner's own
// session when it has one, which also finds that session dead (the next
// Balance opens it again), and over the pool otherwise.
func (s *Store) Rebalance(ctx context.Context, owner string) (bool, error) {
	live := "lease_until > " + dbNow
	n := strconv.Itoa(numShards)
	q := "SELECT EXISTS (SELECT 1 FROM " + s.relaysTable() + " r WHERE " + s.orphanedSQL() + ")" +
		" OR COALESCE((SELECT l.n > 0 AND m.held > FLOOR(" + n + " / l.n) + (l.ahead < " + n + " MOD l.n)" +
		" AND EXISTS (SELECT 1 FROM " + s.relaysTable() + " o WHERE o.owner <> ? AND o." + live +
		" AND (SELECT COUNT(*) FROM " + s.shardsTable() + " h WHERE h.owner = o.owner) < FLOOR(" + n + " / l.n))" +
		" FROM (SELECT COUNT(*) AS n, COALESCE(SUM(owner < ?), 0) AS ahead FROM " + s.relaysTable() + " WHERE " + live + ") l," +
		" (SELECT COUNT(*) AS held FROM " + s.shardsTable() + " WHERE owner = ?) m), FALSE)"
	args := []any{s.schema, s.opts.Table, owner, owner, owner, owner}
	var found bool
	s.mu.Lock()
	rs := s.sessions[owner]
	s.mu.Unlock()
	if rs != nil {
		rs.mu.Lock()
		if rs.conn != nil {
			err := rs.conn.QueryRowContext(ctx, q, args...).Scan(&found)
			if err == nil {
				rs.mu.Unlock()
				return found, nil
			}
			rs.drop()
		}
		rs.mu.Unlock()
	}
	err := s.db.QueryRowContext(ctx, q, args...).Scan(&found)
	return found, wrap("rebalance", err)
}

// reap ends, as of now (the transaction's clock; the statement's for the
// rows), the membership of the
// live relays other than owner whose session is gone, and the leases of
// their in-flight rows, in tx. Rows a live heartbeat has locked are
// skipped (that relay is renewing them: it lives). The dead relays' rows
// are read first and changed by name, so the statements that write are
// the same on every binlog format.
func (s *Store) reap(ctx context.Context, tx *sql.Tx, owner string, now int64) error {
	rows, err := tx.QueryContext(ctx, "SELECT r.owner FROM "+s.relaysTable()+" r WHERE "+s.orphanedSQL()+" FOR UPDATE SKIP LOCKED", s.schema, s.opts.Table, owner)
	if err != nil {
		return err
	}
	var dead []any
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			rows.Close()
			return err
		}
		dead = append(dead, o)
	}
	if err := rows.Err(); err != nil || len(dead) == 0 {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+s.relaysTable()+" SET lease_until = LEAST(lease_until, ?) WHERE owner IN ("+marks(len(dead))+")", append([]any{now}, dead...)...); err != nil {
		return err
	}
	// Their in-flight rows keep other owners' claims out of their shards
	// while leased: their leases end now too, and the next claim over a
	// shard takes them over.
	_, err = tx.ExecContext(ctx, "UPDATE "+s.table+" o FORCE INDEX ("+s.busyIdx()+") SET o.lease_until = NOW(6) WHERE o.busy BETWEEN 0 AND ? AND o.status = 'SENDING' AND o.lease_owner IN ("+marks(len(dead))+") AND o.lease_until > NOW(6)",
		append([]any{numShards - 1}, dead...)...)
	return err
}
