package pgstore

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox/store"
)

var _ store.BacklogReader = (*Store)(nil)

// backlogSettings plan Backlog (transaction-local, as claimSettings): its
// guards of holdSQL are one probe each of a small partial index, but a
// queue table's statistics made PostgreSQL plan the delayed-row guard as a
// parallel scan, whose workers' start-up took 40 ms of a 45 ms Backlog.
const backlogSettings = "SELECT set_config('enable_seqscan', 'off', true), set_config('max_parallel_workers_per_gather', '0', true), set_config('jit', 'off', true)"

// Backlog summarizes what waits at a bounded cost: the ends of the primary
// key among pending rows, the age of the oldest due row among the first
// store.DueWindow pending ones (not parked, next attempt come, not held by
// an earlier row of its key as holdSQL says, DEAD rows holding), and up
// to store.DeadCap DEAD rows of the partial index that holds them. Over a 1,000,000-row
// backlog it took about a millisecond here where Stats took seconds
// (BENCHMARKS.md, "The overhead of metrics, tracing and the dashboard").
func (s *Store) Backlog(ctx context.Context) (store.Backlog, error) {
	var b store.Backlog
	var age float64
	batch := &pgx.Batch{}
	batch.Queue(backlogSettings)
	batch.Queue(`SELECT
	COALESCE((SELECT max(id) FROM ` + s.table + ` WHERE status = 'NEW') - (SELECT min(id) FROM ` + s.table + ` WHERE status = 'NEW') + 1, 0),
	COALESCE(EXTRACT(EPOCH FROM now() - (SELECT min(CASE WHEN isfinite(c.created_at) THEN c.created_at END)
		FROM (SELECT id, event_key, created_at, next_attempt_at, parked FROM ` + s.table + ` WHERE status = 'NEW' ORDER BY id LIMIT ` + strconv.Itoa(store.DueWindow) + `) c
		WHERE NOT c.parked AND (c.next_attempt_at <= now() OR c.next_attempt_at <= c.created_at) AND NOT (` + s.holdSQL("true") + `))), 0)::float8,
	(SELECT count(*) FROM (SELECT 1 FROM ` + s.table + ` WHERE status = 'DEAD' LIMIT ` + strconv.Itoa(store.DeadCap) + `) d)`)
	br := s.pool.SendBatch(ctx, batch)
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&b.Pending, &age, &b.Dead)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return b, wrap("backlog", err)
	}
	b.OldestPendingAge = store.AgeOf(age)
	return b, nil
}
