package store

import (
	"context"
	"time"
)

// Backlog is a summary of what waits in an outbox table whose cost does not
// grow with the backlog, for metrics scrapes and readiness checks (Stats
// counts every row exactly, which over a million-row backlog takes seconds).
type Backlog struct {
	// Pending estimates the events waiting (NEW or claimed): the span of
	// their ids, exact when ids have no gaps (rolled-back inserts and
	// events delivered out of id order leave some; it never counts low).
	Pending int64
	// OldestPendingAge is the age of the waiting event with the lowest id
	// (database clock); 0 when none waits.
	OldestPendingAge time.Duration
	// Dead counts DEAD events exactly (a small partial index).
	Dead int64
}

// BacklogReader is an optional ability of a store: Backlog at a bounded
// cost.
type BacklogReader interface {
	Backlog(ctx context.Context) (Backlog, error)
}
