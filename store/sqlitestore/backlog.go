package sqlitestore

import (
	"context"
	"strconv"

	"github.com/outbox-go/outbox/store"
)

var _ store.BacklogReader = (*Store)(nil)

// Backlog summarizes what waits at a bounded cost: the ends of the primary
// key among pending rows (NEW or SENDING), the age of the oldest due one
// among the first store.DueWindow (SENDING, or NEW, not parked, due and not
// held by an earlier row of its key as heldSQL says, DEAD
// rows holding), and up to store.DeadCap DEAD rows of their partial index.
func (s *Store) Backlog(ctx context.Context) (store.Backlog, error) {
	var b store.Backlog
	var ageUS float64 // a real when the difference leaves SQLite's integers
	t := s.table
	err := s.db.QueryRowContext(ctx, `SELECT
	COALESCE((SELECT max(id) FROM `+t+` WHERE status IN ('NEW', 'SENDING')) - (SELECT min(id) FROM `+t+` WHERE status IN ('NEW', 'SENDING')) + 1, 0),
	COALESCE(`+nowUS+` - (SELECT min(CASE WHEN typeof(o.created_at) = 'integer' THEN o.created_at END)
		FROM (SELECT id, event_key, status, parked, next_attempt_at, created_at FROM `+t+` WHERE status IN ('NEW', 'SENDING') ORDER BY id LIMIT `+strconv.Itoa(store.DueWindow)+`) AS o
		WHERE o.status = 'SENDING' OR (o.parked = 0 AND (o.next_attempt_at <= `+nowUS+` OR o.next_attempt_at <= o.created_at) AND NOT (`+s.heldSQL(nowUS, "1")+`))), 0),
	(SELECT count(*) FROM (SELECT 1 FROM `+t+` WHERE status = 'DEAD' LIMIT `+strconv.Itoa(store.DeadCap)+`))`).Scan(&b.Pending, &ageUS, &b.Dead)
	if err != nil {
		return b, wrap("backlog", err)
	}
	b.OldestPendingAge = store.AgeOf(ageUS / 1e6)
	return b, nil
}
