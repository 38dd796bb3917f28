package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

var errClosed = errors.New("the store is closed")

// A write gate lets one of this process's writers at a time at a database.
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
type gate chan struct{}

func newGate() gate { return make(gate, 1) }

// lock waits for the gate, in arrival order; the caller must call unlock
// when it returns nil.
func (g gate) lock(ctx context.Context) error {
	select {
	case g <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g gate) unlock() { <-g }

var writeGates = struct {
	sync.Mutex
	m map[*sql.DB]*sharedGate
}{m: map[*sql.DB]*sharedGate{}}

type sharedGate struct {
	g    gate
	refs int
}

// acquireWriteGate returns the write gate of db; releaseWriteGate gives it
// back when the Store closes.
func acquireWriteGate(db *sql.DB) gate {
	writeGates.Lock()
	defer writeGates.Unlock()
	sg := writeGates.m[db]
	if sg == nil {
		sg = &sharedGate{g: newGate()}
		writeGates.m[db] = sg
	}
	sg.refs++
	return sg.g
}

func releaseWriteGate(db *sql.DB) {
	writeGates.Lock()
	defer writeGates.Unlock()
	if sg := writeGates.m[db]; sg != nil {
		if sg.refs--; sg.refs <= 0 {
			delete(writeGates.m, db)
		}
	}
}

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
