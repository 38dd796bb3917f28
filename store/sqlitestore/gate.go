package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

var errClosed = errors.New("the store is closed")

// A writeGate lets one of this process's writers at a time at a database.
//
// SQLite has one write lock per file, and a connection that finds it taken
// sleeps and polls (the busy timeout). Polling is not a queue: under steady
// load (eight relays claiming and acking) the lock is almost always held
// when a sleeper wakes, and a writer can starve until its busy timeout runs
// out with SQLITE_BUSY while others are served again and again. The gate
// queues the store's own writers in Go, in arrival order and honouring ctx,
// so the busy timeout only has to cover writers outside it: other processes
// and the caller's transactions.
//
// Stores over the same *sql.DB share one gate.
type writeGate struct {
	ch   chan struct{}
	refs int
}

var gates = struct {
	sync.Mutex
	m map[*sql.DB]*writeGate
}{m: map[*sql.DB]*writeGate{}}

func acquireGate(db *sql.DB) *writeGate {
	gates.Lock()
	defer gates.Unlock()
	g := gates.m[db]
	if g == nil {
		g = &writeGate{ch: make(chan struct{}, 1)}
		gates.m[db] = g
	}
	g.refs++
	return g
}

func releaseGate(db *sql.DB) {
	gates.Lock()
	defer gates.Unlock()
	if g := gates.m[db]; g != nil {
		if g.refs--; g.refs <= 0 {
			delete(gates.m, db)
		}
	}
}

// lock waits for the gate; the caller must call unlock when it returns nil.
func (g *writeGate) lock(ctx context.Context) error {
	select {
	case g.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *writeGate) unlock() { <-g.ch }

// stmt returns query prepared on the store's *sql.DB, from a cache: SQLite
// spends more time parsing a claim than running it, and database/sql keeps a
// prepared statement per connection.
func (s *Store) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	st := s.stmts[query]
	s.stmtMu.Unlock()
	if st != nil {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err // "no such table" before Migrate: not cached
	}
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if s.stmts == nil {
		st.Close()
		return nil, errClosed
	}
	if prev := s.stmts[query]; prev != nil {
		st.Close()
		return prev, nil
	}
	s.stmts[query] = st
	return st, nil
}
