package mysqlstore

import (
	"context"
	"time"

	"github.com/outbox-go/outbox/store"
)

var _ store.BacklogReader = (*Store)(nil)

// Backlog summarizes what waits at a bounded cost: the ends of the primary
// key among pending rows (NEW or SENDING), the first one's age and the DEAD
// rows of the hold index.
func (s *Store) Backlog(ctx context.Context) (store.Backlog, error) {
	var b store.Backlog
	var age int64
	err := s.db.QueryRowContext(ctx, `SELECT
	COALESCE((SELECT MAX(id) FROM `+s.table+` WHERE status IN ('NEW', 'SENDING')) - (SELECT MIN(id) FROM `+s.table+` WHERE status IN ('NEW', 'SENDING')) + 1, 0),
	COALESCE(TIMESTAMPDIFF(MICROSECOND, (SELECT created_at FROM `+s.table+` WHERE status IN ('NEW', 'SENDING') ORDER BY id LIMIT 1), CURRENT_TIMESTAMP(6)), 0),
	(SELECT COUNT(*) FROM `+s.table+` WHERE status = 'DEAD')`).Scan(&b.Pending, &age, &b.Dead)
	if err != nil {
		return b, wrap("backlog", err)
	}
	b.OldestPendingAge = time.Duration(max(age, 0)) * time.Microsecond
	return b, nil
}
