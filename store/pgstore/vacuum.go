package pgstore

import (
	"context"
	"time"
)

// Why the store vacuums its own table.
//
// A claim walks the primary key from its lowest id, and every row the relay
// deleted stays in that index, as a dead entry to step over, until VACUUM
// removes it. Autovacuum visits a table at most once per
// autovacuum_naptime (a minute by default) and only past its thresholds,
// so between two visits each claim walks over everything drained since the
// last one. Measured with `outbox bench`: after draining 200,000 events the
// commit-to-ack latency at 1,000 events/s was p50 2.0 ms; after one VACUUM
// (81 ms) it was 0.9 ms. Each VACUUM after the first skips the pages that
// nothing changed since (the visibility map), so its cost follows the rows
// deleted and inserted since the last one, plus one pass over each index.

// DefaultVacuumAfter is Config.VacuumAfter's default.
const DefaultVacuumAfter = 20_000

// vacuumSpacing is the least time between two vacuums by one Store.
const vacuumSpacing = time.Second

// vacuumTimeout bounds one VACUUM; a larger table is left to autovacuum.
const vacuumTimeout = time.Minute

// busyVacuumFactor: while claims come back full (a backlog is being
// drained) the store waits for this many times VacuumAfter deleted rows
// before it vacuums. A VACUUM in the middle of a drain costs about what it
// saves the claims after it (both grow with the rows deleted; measured
// with `outbox bench`), while the first claim that finds the backlog gone
// is the moment one pays off: the claims from then on are the ones latency
// waits for.
const busyVacuumFactor = 10

// deleted records n rows deleted from the outbox table by this Store; past
// busyVacuumFactor × Config.VacuumAfter of them it vacuums even while
// claims still come back full.
func (s *Store) deleted(n int64) {
	if s.vacuumAfter <= 0 || n <= 0 {
		return
	}
	if s.sinceVacuum.Add(n) >= busyVacuumFactor*s.vacuumAfter {
		s.startVacuum()
	}
}

// caughtUp is told by a claim that found fewer events than it asked for:
// past Config.VacuumAfter deleted rows, the store vacuums now.
func (s *Store) caughtUp() {
	if s.vacuumAfter > 0 && s.sinceVacuum.Load() >= s.vacuumAfter {
		s.startVacuum()
	}
}

// startVacuum starts a VACUUM in the background unless one is running or
// the last ended less than vacuumSpacing ago.
func (s *Store) startVacuum() {
	if time.Since(s.lastVacuum.Load().(time.Time)) < vacuumSpacing || !s.vacuuming.CompareAndSwap(false, true) {
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.vacuuming.Store(false)
		return
	}
	s.background.Add(1)
	s.mu.Unlock()
	s.sinceVacuum.Store(0) // rows deleted from now on count toward the next one
	go func() {
		defer s.background.Done()
		defer s.vacuuming.Store(false)
		ctx, cancel := context.WithTimeout(s.backgroundCtx, vacuumTimeout)
		defer cancel()
		// SKIP_LOCKED: when autovacuum (or an operator) is vacuuming the
		// table already, skip it rather than wait. A role that does not
		// own the table gets a warning from PostgreSQL, not an error, and
		// nothing is vacuumed: autovacuum still runs.
		_, err := s.pool.Exec(ctx, "VACUUM (SKIP_LOCKED) "+s.table+", "+s.claimsTable())
		s.lastVacuum.Store(time.Now())
		s.vacuumErr.Store(errBox{err})
	}()
}

// errBox lets an atomic.Value hold a nil error.
type errBox struct{ err error }

// LastVacuumError is the error of the last VACUUM this Store started on its
// own (Config.VacuumAfter), nil when it succeeded or none ran. A vacuum that
// fails changes nothing but the speed of claims: autovacuum still runs.
func (s *Store) LastVacuumError() error {
	if b, ok := s.vacuumErr.Load().(errBox); ok {
		return b.err
	}
	return nil
}
