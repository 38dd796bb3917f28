package sqlitestore

import (
	"context"

	"github.com/outbox-go/outbox/store"
)

var _ store.BacklogReader = (*Store)(nil)

// Backlog summarizes what waits at a bounded cost: the ends of the primary
// key among pending rows (NEW or SENDING), the first one's age and the DEAD
// rows of their partial index.
func (s *Store) Backlog(ctx context.Context) (store.Backlog, error) {
	var b store.Backlog
	var ageUS float64 // a real when the difference leaves SQLite's integers
	err := s.db.QueryRowContext(ctx, `SELECT
	COALESCE((SELECT max(id) FROM `+s.table+` WHERE status IN ('NEW', 'SENDING')) - (SELECT min(id) FROM `+s.table+` WHERE status IN ('NEW', 'SENDING')) + 1, 0),
	COALESCE(`+nowUS+` - (SELECT CASE WHEN typeof(created_at) = 'integer' THEN created_at END FROM `+s.table+` WHERE status IN ('NEW', 'SENDING') ORDER BY id LIMIT 1), 0),
	(SELECT count(*) FROM `+s.table+` WHERE status = 'DEAD')`).Scan(&b.Pending, &ageUS, &b.Dead)
	if err != nil {
		return b, wrap("backlog", err)
	}
	b.OldestPendingAge = store.AgeOf(ageUS / 1e6)
	return b, nil
}
