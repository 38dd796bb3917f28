package store

import (
	"context"
	"math"
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
	// OldestPendingAge is the age (database clock) of the oldest due
	// event: one in flight, or one the claim may take now (its next
	// attempt has come, and no earlier row of its key holds it: DEAD,
	// parked, or waiting for a retry or a delayed AvailableAt). A row held
	// by its own next_attempt_at, or behind a DEAD row of its key, is not
	// due: nothing may deliver it, so it is no stall (the DEAD row is in
	// Dead). Only the first DueWindow waiting events by id are looked at,
	// so the cost stays bounded: 0 when none waits, and 0 too when none
	// of those is due.
	OldestPendingAge time.Duration
	// Dead counts DEAD events, exactly up to DeadCap; a table with more
	// reads DeadCap (Stats counts them all). Counting every one of a
	// large, freshly written set visits each row: 100,000 took a third
	// of a second, on every scrape.
	Dead int64
}

// DueWindow is how many waiting events, lowest ids first, Backlog looks at for the oldest due one.
const DueWindow = 1000

// DeadCap is the most DEAD events Backlog counts.
const DeadCap = 10000

// BacklogReader is an optional ability of a store: Backlog at a bounded
// cost.
type BacklogReader interface {
	Backlog(ctx context.Context) (Backlog, error)
}

// AgeOf turns an age in seconds, as a database computes it, into a
// Duration, capped at the largest one: a row a producer dated in year 1
// is older than a Duration can say, and a conversion past the range would
// wrap to a negative age.
func AgeOf(seconds float64) time.Duration {
	switch {
	case seconds != seconds || seconds <= 0: // NaN or none
		return 0
	case seconds >= float64(math.MaxInt64)/float64(time.Second):
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(seconds * float64(time.Second))
}
