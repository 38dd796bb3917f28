package pgstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Claim connections: each owner's claims run on a connection of their own.
//
// PostgreSQL prepares and plans the claim statement once per connection
// and per variant (ownedClaimSQL: the ranged read, the walks of 1 to 64
// branches), and that first run costs 17–65 ms against well under 1 ms
// for the next ones (BENCHMARKS.md, "Where a claim's tails come from").
// Through the pool, a relay's claims landed on any of its ten connections,
// each planning every variant at its first claim and again after pgxpool
// replaced it: a claim of tens of milliseconds, and every event committed
// meanwhile waited for it. A relay's claims run one at a time anyway, so
// one connection opened at its first claim (outside the pool, like the
// relay's session, so a pool closed without Close does not wait for it)
// plans each variant once for the life of the relay. A connection that
// broke or was left inside a transaction (a failed claim, a cancelled
// context) is closed, and the next claim opens another.

// claimConn is one owner's claim connection (in its relaySession).
type claimConn struct {
	mu   sync.Mutex // a pgx.Conn is used by one goroutine at a time
	conn *pgx.Conn  // nil before the first claim and after a failure
	// ended: the owner left, or the Store closed; the claim in flight,
	// if any, closes the connection when done
	ended atomic.Bool
}

// errStoreClosed: a claim after Close.
var errStoreClosed = errors.New("pgstore: the store is closed")

// claimConn returns owner's claim connection, locked; call done when the
// claim's batch is closed.
func (s *Store) claimConn(ctx context.Context, owner string) (*claimConn, error) {
	rs := s.relaySession(owner)
	if rs == nil {
		return nil, errStoreClosed
	}
	cc := &rs.claim
	cc.mu.Lock()
	if cc.conn == nil {
		conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
		if err != nil {
			cc.mu.Unlock()
			return nil, err
		}
		cc.conn = conn
	}
	return cc, nil
}

// done unlocks the connection, closing it first unless it is open and
// idle (outside any transaction).
func (cc *claimConn) done() {
	if cc.conn != nil && (cc.ended.Load() || cc.conn.IsClosed() || cc.conn.PgConn().TxStatus() != 'I') {
		cc.drop()
	}
	cc.mu.Unlock()
}

// drop closes the connection (under cc.mu).
func (cc *claimConn) drop() {
	if cc.conn != nil {
		_ = cc.conn.Close(context.Background())
		cc.conn = nil
	}
}

// end closes the connection now if no claim runs on it; otherwise the
// running claim closes it when done. Nothing here waits for that claim:
// one the relay gave up on (its context ended) may still be running on
// the server when the relay leaves.
func (cc *claimConn) end() {
	cc.ended.Store(true)
	if cc.mu.TryLock() {
		cc.drop()
		cc.mu.Unlock()
	}
}
