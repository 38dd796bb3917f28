package pgstore

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
)

// Claim takes up to req.Limit ready events in id order. One round trip: the
// advisory lock and the claim run in one implicit transaction.
func (s *Store) Claim(ctx context.Context, req store.ClaimRequest) (store.Claim, error) {
	req = req.Normalize()
	// The UPDATE finds the picked rows through ANY(ARRAY(…)): a join
	// against the CTE was planned as a hash join over a sequential scan of
	// the whole table, which grew with the backlog.
	//
	// A keyed row is held back when its key has an event in flight under a
	// live lease, an earlier event waiting for a retry or a delayed
	// AvailableAt, or (HoldDeadKeys) an earlier DEAD event. Each check is a
	// probe of a small partial index, evaluated only for keyed candidates;
	// a materialized "held keys" set joined by nested loop went quadratic
	// with a batch in flight.
	claimSQL := `WITH picked AS (
	SELECT o.id FROM ` + s.table + ` o
	WHERE ((o.status = 'NEW' AND o.next_attempt_at <= now()) OR (o.status = 'SENDING' AND o.lease_until <= now() - ` + takeoverGrace + `))
	  AND (o.event_key = '' OR (
		NOT EXISTS (SELECT 1 FROM ` + s.table + ` b WHERE b.status = 'SENDING' AND b.event_key = o.event_key AND b.lease_until > now() - ` + takeoverGrace + `)
		AND NOT EXISTS (SELECT 1 FROM ` + s.table + ` b WHERE b.status = 'NEW' AND b.next_attempt_at > b.created_at AND b.event_key = o.event_key AND b.id < o.id AND b.next_attempt_at > now())
		AND NOT ($3::bool AND EXISTS (SELECT 1 FROM ` + s.table + ` b WHERE b.status = 'DEAD' AND b.event_key = o.event_key AND b.id < o.id))))
	ORDER BY o.id
	LIMIT $4
	FOR UPDATE OF o SKIP LOCKED
)
UPDATE ` + s.table + ` t SET status = 'SENDING', lease_owner = $1, lease_epoch = $2, lease_until = now() + $5 * interval '1 microsecond'
WHERE t.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING ` + prefixed(eventCols, "t.") + `, t.lease_until`
	b := &pgx.Batch{}
	// Planner settings for this claim only (set_config(…, true) is
	// transaction-local): a queue table's statistics are nearly always stale,
	// and with none or old ones PostgreSQL chose a sequential scan and sort
	// of the whole table (claims grew with the backlog), a generic plan for
	// the prepared statement that cannot see LIMIT, or a JIT compilation
	// slower than the claim. Walking the primary key in id order is always
	// the right plan here. synchronous_commit: see relaySettings.
	b.Queue("SELECT set_config('enable_seqscan', 'off', true), set_config('enable_sort', 'off', true), set_config('plan_cache_mode', 'force_custom_plan', true), set_config('jit', 'off', true), set_config('synchronous_commit', 'off', true)")
	b.Queue("SELECT pg_advisory_xact_lock($1)", s.claimLock)
	b.Queue(claimSQL, req.Lease.Owner, req.Lease.Epoch, req.HoldDeadKeys, req.Limit, req.LeaseFor.Microseconds())
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return store.Claim{}, wrap("claim", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return store.Claim{}, wrap("claim", err)
	}
	c := store.Claim{Lease: req.Lease}
	for rows.Next() {
		var e outbox.Event
		var headers []byte
		var until time.Time
		if err := rows.Scan(&e.ID, &e.EventID, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.SchemaVersion, &e.Payload, &e.ContentType, &headers, &e.Attempts, &e.CreatedAt, &until); err != nil {
			rows.Close()
			return store.Claim{}, wrap("claim", err)
		}
		if e.Headers, err = store.DecodeHeaders(headers); err != nil {
			rows.Close()
			return store.Claim{}, err
		}
		c.Until = until
		c.Events = append(c.Events, e)
	}
	if err := rows.Err(); err != nil {
		return store.Claim{}, wrap("claim", err)
	}
	if err := br.Close(); err != nil {
		return store.Claim{}, wrap("claim", err)
	}
	sort.Slice(c.Events, func(i, j int) bool { return c.Events[i].ID < c.Events[j].ID })
	return c, nil
}

// leaseCheck is the compare-and-swap every state change does.
const leaseCheck = " AND status = 'SENDING' AND lease_owner = $2 AND lease_epoch = $3"

// takeoverGrace and fencedSettings close the last race of lease expiry. A
// relay's fenced write (retry, bury, release, extend) checks that its lease
// is live when the statement starts and then holds the row's lock until it
// commits. A claim that skipped that locked row (SKIP LOCKED) and saw the
// lease already expired would treat the key as free and could take the
// key's next event while the first one is being put back for a retry. So a
// claim takes over only leases expired longer ago than takeoverGrace, and
// a fenced write may run at most fencedTimeout, which is shorter: no
// fenced write can still hold a row when a claim may take it over.
const (
	takeoverGrace  = "interval '250 milliseconds'"
	fencedSettings = "SELECT set_config('synchronous_commit', 'off', true), set_config('statement_timeout', '200', true)"
)

// relaySettings are transaction-local settings for the relay's own writes
// (claim, ack, retry, bury, release). synchronous_commit = off: these
// writes need no flush before the reply, because losing one in a database
// crash only re-delivers (a lost claim or ack brings the event back under
// its lease) and never loses or invents an event; the user's enqueue keeps
// full durability. It takes a WAL flush off every relay round trip.
const relaySettings = "SELECT set_config('synchronous_commit', 'off', true)"

func (s *Store) leased(ctx context.Context, op, settings, sql string, want int, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(settings)
	b.Queue(sql, args...)
	br := s.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return wrap(op, err)
	}
	if int(tag.RowsAffected()) < want {
		return fmt.Errorf("pgstore: %s: %d of %d events: %w", op, want-int(tag.RowsAffected()), want, store.ErrLeaseLost)
	}
	return nil
}

// Extend renews the lease on ids until now+d.
func (s *Store) Extend(ctx context.Context, lease store.Lease, ids []int64, d time.Duration) (time.Time, error) {
	if len(ids) == 0 {
		return time.Time{}, nil
	}
	b := &pgx.Batch{}
	b.Queue(fencedSettings)
	b.Queue("UPDATE "+s.table+" SET lease_until = now() + $4 * interval '1 microsecond' WHERE id = ANY($1)"+leaseCheck+" AND lease_until > now() RETURNING lease_until",
		ids, lease.Owner, lease.Epoch, d.Microseconds())
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return time.Time{}, wrap("extend", err)
	}
	rows, err := br.Query()
	if err != nil {
		return time.Time{}, wrap("extend", err)
	}
	until, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return time.Time{}, wrap("extend", err)
	}
	if len(until) < len(ids) {
		return time.Time{}, fmt.Errorf("pgstore: extend: %d of %d events: %w", len(ids)-len(until), len(ids), store.ErrLeaseLost)
	}
	return until[0], nil
}

// Ack deletes ids, or moves them to the archive as SENT with KeepSent.
func (s *Store) Ack(ctx context.Context, lease store.Lease, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	where := " WHERE id = ANY($1)" + leaseCheck
	if !s.opts.KeepSent {
		return s.leased(ctx, "ack", relaySettings, "DELETE FROM "+s.table+where, len(ids), ids, lease.Owner, lease.Epoch)
	}
	cols := "id, event_id, topic, event_key, event_type, aggregate_type, schema_version, payload, content_type, headers, attempts, next_attempt_at, last_error, lease_owner, lease_epoch, lease_until, created_at"
	sql := "WITH d AS (DELETE FROM " + s.table + where + " RETURNING " + cols + ") INSERT INTO " + s.archive + " (" + cols + ", status, sent_at) SELECT " + cols + ", 'SENT', now() FROM d"
	return s.leased(ctx, "ack", relaySettings, sql, len(ids), ids, lease.Owner, lease.Epoch)
}

// Retry gives events back for a later attempt. The lease must still be live.
func (s *Store) Retry(ctx context.Context, lease store.Lease, retries []store.Retry) error {
	if len(retries) == 0 {
		return nil
	}
	ids := make([]int64, len(retries))
	delays := make([]int64, len(retries))
	errs := make([]string, len(retries))
	for i, r := range retries {
		ids[i], delays[i], errs[i] = r.ID, max(r.Delay, 0).Microseconds(), store.CleanError(r.Error)
	}
	sql := "UPDATE " + s.table + " t SET status = 'NEW', attempts = t.attempts + 1, next_attempt_at = now() + u.delay_us * interval '1 microsecond', last_error = u.err, lease_owner = '', lease_until = NULL " +
		"FROM unnest($1::bigint[], $4::bigint[], $5::text[]) AS u(id, delay_us, err) WHERE t.id = u.id AND t.status = 'SENDING' AND t.lease_owner = $2 AND t.lease_epoch = $3 AND t.lease_until > now()"
	return s.leased(ctx, "retry", fencedSettings, sql, len(ids), ids, lease.Owner, lease.Epoch, delays, errs)
}

// Bury marks events DEAD with their reason. The lease must still be live.
func (s *Store) Bury(ctx context.Context, lease store.Lease, burials []store.Burial) error {
	if len(burials) == 0 {
		return nil
	}
	ids := make([]int64, len(burials))
	errs := make([]string, len(burials))
	for i, b := range burials {
		ids[i], errs[i] = b.ID, store.CleanError(b.Error)
	}
	sql := "UPDATE " + s.table + " t SET status = 'DEAD', attempts = t.attempts + 1, last_error = u.err, lease_owner = '', lease_until = NULL " +
		"FROM unnest($1::bigint[], $4::text[]) AS u(id, err) WHERE t.id = u.id AND t.status = 'SENDING' AND t.lease_owner = $2 AND t.lease_epoch = $3 AND t.lease_until > now()"
	return s.leased(ctx, "bury", fencedSettings, sql, len(ids), ids, lease.Owner, lease.Epoch, errs)
}

// Release gives events back untouched. The lease must still be live.
func (s *Store) Release(ctx context.Context, lease store.Lease, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	sql := "UPDATE " + s.table + " SET status = 'NEW', lease_owner = '', lease_until = NULL WHERE id = ANY($1)" + leaseCheck + " AND lease_until > now()"
	return s.leased(ctx, "release", fencedSettings, sql, len(ids), ids, lease.Owner, lease.Epoch)
}
