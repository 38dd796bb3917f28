package sqlitestore

import (
	"context"
	"time"

	"github.com/outbox-go/outbox/store"
)

var _ store.BacklogReader = (*Store)(nil)

// Backlog summarizes what waits at a bounded cost: the ends of the primary
// key among pending rows (NEW or SENDING), the first one's age and the DEAD
// rows of their partial index.
func (s *Store) Backlog(ctx context.Context) (store.Backlog, error) {
	var b store.Backlog
	var ageUS int64
	err := s.db.QueryRowContext(ctx, `SELECT
	COALESCE((SELECT max(id) FROM `+s.table+` WHERE status IN ('NEW', 'SENDING')) - (SELECT min(id) FROM `+s.table+` WHERE status IN ('NEW', 'SENDING')) + 1, 0),
	COALESCE(`+nowUS+` - (SELECT created_at FROM `+s.table+` WHERE status IN ('NEW', 'SENDING') ORDER BY id LIMIT 1), 0),
	(SELECT count(*) FROM `+s.table+` WHERE status = 'DEAD')`).Scan(&b.Pending, &ageUS, &b.Dead)
	if err != nil {
		return b, wrap("backlog", err)
	}
	b.OldestPendingAge = time.Duration(max(ageUS, 0)) * time.Microsecond
	return b, nil
}
