package mysqlstore

import (
	"context"
	"strconv"
	"time"

	"github.com/outbox-go/outbox/store"
)

var _ store.BacklogReader = (*Store)(nil)

// Backlog summarizes what waits at a bounded cost: the ends of the primary
// key among pending rows (NEW or SENDING), each read by walking the primary
// key from its end (MIN and MAX over the status range of the hold index
// read every waiting row: 0.4–0.6 s at 1,000,000), the age of the oldest due one
// among the first store.DueWindow (SENDING, or NEW, not parked, due by
// dueSQL and not held by heldSQL, DEAD rows holding), and up to
// store.DeadCap DEAD rows of the hold index.
func (s *Store) Backlog(ctx context.Context) (store.Backlog, error) {
	var b store.Backlog
	var age int64
	err := s.db.QueryRowContext(ctx, `SELECT
	COALESCE((SELECT id FROM `+s.table+` FORCE INDEX (PRIMARY) WHERE status IN ('NEW', 'SENDING') ORDER BY id DESC LIMIT 1)
		- (SELECT id FROM `+s.table+` FORCE INDEX (PRIMARY) WHERE status IN ('NEW', 'SENDING') ORDER BY id LIMIT 1) + 1, 0),
	COALESCE(TIMESTAMPDIFF(MICROSECOND, (SELECT MIN(o.created_at)
		FROM (SELECT id, event_key, status, parked, next_attempt_at, created_at FROM `+s.table+` WHERE status IN ('NEW', 'SENDING') ORDER BY id LIMIT `+strconv.Itoa(store.DueWindow)+`) o
		WHERE o.status = 'SENDING' OR (o.parked = 0 AND `+dueSQL("o.")+` AND NOT `+s.heldSQL()+`)), CURRENT_TIMESTAMP(6)), 0),
	(SELECT COUNT(*) FROM (SELECT 1 FROM `+s.table+` WHERE status = 'DEAD' LIMIT `+strconv.Itoa(store.DeadCap)+`) d)`, true).Scan(&b.Pending, &age, &b.Dead)
	if err != nil {
		return b, wrap("backlog", err)
	}
	b.OldestPendingAge = time.Duration(max(age, 0)) * time.Microsecond
	return b, nil
}
