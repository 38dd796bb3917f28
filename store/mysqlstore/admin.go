package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// recordSizeCols are recordCols and the payload's length, as scanRecord
// reads them; previewCols the same with the payload's first
// store.PreviewBytes only.
var (
	recordSizeCols = append(recordCols[:len(recordCols):len(recordCols)], "LENGTH(%spayload)")
	previewCols    = func() []string {
		out := slices.Clone(recordSizeCols)
		out[slices.Index(out, "payload")] = "SUBSTRING(%spayload, 1, " + strconv.Itoa(store.PreviewBytes) + ")"
		return out
	}()
)

func scanRecord(row scanner, extra ...any) (store.Record, error) {
	var r store.Record
	var status string
	var next, until, sent sql.NullString
	// A row whose headers break the contract is still shown (its
	// last_error says why once a claim buried it), without headers.
	if _, err := scanEvent(row, &r.Event, append([]any{&status, &r.LastError, &next, &r.LeaseOwner, &until, &sent, &r.PayloadSize}, extra...)...); err != nil {
		return r, err
	}
	r.Status = outbox.Status(status)
	var err error
	if r.NextAttemptAt, err = epoch(next); err != nil {
		return r, err
	}
	if r.LeaseUntil, err = epoch(until); err != nil {
		return r, err
	}
	r.SentAt, err = epoch(sent)
	return r, err
}

// Get returns one event from the outbox or the archive, in one query (the
// outbox first: during an Ack with KeepSent a row is briefly in both).
func (s *Store) Get(ctx context.Context, id int64) (store.Record, error) {
	var src int
	r, err := scanRecord(s.db.QueryRowContext(ctx, "(SELECT "+cols(recordSizeCols, "")+", 0 AS src FROM "+s.table+" WHERE id = ?) UNION ALL "+
		"(SELECT "+cols(recordSizeCols, "")+", 1 FROM "+s.archive+" WHERE id = ?) ORDER BY src LIMIT 1", id, id), &src)
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("mysqlstore: event %d: %w", id, store.ErrNotFound)
	}
	return r, wrap("get", err)
}

// deadFilter selects DEAD events matching q.
func deadFilter(q store.DeadQuery) (string, []any) {
	where := " WHERE status = 'DEAD'"
	var args []any
	if q.Topic != "" {
		where += " AND topic = ?"
		args = append(args, q.Topic)
	}
	if q.Key != "" {
		where += " AND event_key = ?"
		args = append(args, q.Key)
	}
	if len(q.IDs) > 0 {
		where += " AND id IN (" + marks(len(q.IDs)) + ")"
		args = appendIDs(args, q.IDs)
	}
	return where, args
}

var _ store.PayloadReader = (*Store)(nil)

// ReadPayload returns n bytes of event id's payload from offset on.
func (s *Store) ReadPayload(ctx context.Context, id int64, offset, n int) ([]byte, error) {
	b := []byte{}
	err := s.db.QueryRowContext(ctx, "(SELECT SUBSTRING(payload, ?, ?), 0 AS src FROM "+s.table+" WHERE id = ?) UNION ALL (SELECT SUBSTRING(payload, ?, ?), 1 FROM "+s.archive+" WHERE id = ?) ORDER BY src LIMIT 1",
		offset+1, n, id, offset+1, n, id).Scan(&b, new(int))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("mysqlstore: event %d: %w", id, store.ErrNotFound)
	}
	if b == nil {
		b = []byte{}
	}
	return b, wrap("read payload", err)
}

// ListDead lists DEAD events in id order.
func (s *Store) ListDead(ctx context.Context, q store.DeadQuery) ([]store.Record, error) {
	if q.Limit <= 0 {
		q.Limit = driver.DefaultLimit
	}
	where, args := deadFilter(q)
	rows, err := s.db.QueryContext(ctx, "SELECT "+cols(previewCols, "")+" FROM "+s.table+where+" AND id > ? ORDER BY id LIMIT ?", append(args, q.After(), q.Limit)...)
	if err != nil {
		return nil, wrap("list dead", err)
	}
	defer rows.Close()
	var out []store.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, wrap("list dead", err)
		}
		out = append(out, r)
	}
	return out, wrap("list dead", rows.Err())
}

// RequeueDead turns matching DEAD events back into NEW with attempts 0.
func (s *Store) RequeueDead(ctx context.Context, q store.DeadQuery) (int64, error) {
	where, args := deadFilter(q)
	keys, err := s.parkedKeys(ctx, "", "o.id IN (SELECT id FROM "+s.table+where+")", args...)
	if err != nil {
		return 0, wrap("requeue dead", err)
	}
	res, err := s.db.ExecContext(ctx, "UPDATE "+s.table+" SET status = 'NEW', attempts = 0, next_attempt_at = NOW(6), lease_owner = '', lease_until = NULL"+where, args...)
	if err != nil {
		return 0, wrap("requeue dead", err)
	}
	if err := s.unparkKeys(ctx, keys); err != nil {
		return 0, wrap("requeue dead: unpark", err)
	}
	n, _ := res.RowsAffected()
	if n > 0 {
		s.signal()
	}
	return n, nil
}

// Purge deletes SENT (archived) or DEAD events older than req.OlderThan in
// autocommitted batches of req.BatchSize.
func (s *Store) Purge(ctx context.Context, req store.PurgeRequest) (int64, error) {
	req = req.WithDefaults()
	err := req.Validate()
	if err != nil {
		return 0, err
	}
	var q string
	switch req.Status {
	case outbox.StatusSent:
		q = "DELETE FROM " + s.archive + " WHERE sent_at < NOW(6) - INTERVAL ? MICROSECOND ORDER BY sent_at, id LIMIT ?"
	case outbox.StatusDead:
		ids := ""
		if len(req.IDs) > 0 {
			ids = " AND id IN (" + marks(len(req.IDs)) + ")"
		}
		q = "DELETE FROM " + s.table + " WHERE status = 'DEAD' AND created_at < NOW(6) - INTERVAL ? MICROSECOND AND (? = '' OR topic = ?) AND (? = '' OR event_key = ?)" + ids + " ORDER BY id LIMIT ?"
	default:
		return 0, fmt.Errorf("mysqlstore: purge: status must be SENT or DEAD, not %q", req.Status)
	}
	args := []any{req.OlderThan.Microseconds(), req.BatchSize}
	if req.Status == outbox.StatusDead {
		args = append(appendIDs([]any{req.OlderThan.Microseconds(), req.Topic, req.Topic, req.Key, req.Key}, req.IDs), req.BatchSize)
	}
	var total int64
	for {
		var keys []string
		if req.Status == outbox.StatusDead {
			sel := strings.Replace(q, "DELETE FROM "+s.table, "SELECT id FROM "+s.table, 1)
			// MariaDB refuses LIMIT in an IN subquery; a derived table takes it.
			if keys, err = s.parkedKeys(ctx, "", "o.id IN (SELECT id FROM ("+sel+") d)", args...); err != nil {
				return total, wrap("purge", err)
			}
		}
		res, err := s.db.ExecContext(ctx, q, args...)
		if err != nil {
			return total, wrap("purge", err)
		}
		if err := s.unparkKeys(ctx, keys); err != nil {
			return total, wrap("purge: unpark", err)
		}
		n, _ := res.RowsAffected()
		total += n
		if n < int64(req.BatchSize) {
			return total, nil
		}
	}
}

// Stats counts events by state, in one scan of the outbox (plus a count of
// the archive when sent events are kept).
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	var st store.Stats
	var oldest sql.NullString
	var now int64
	err := s.db.QueryRowContext(ctx, `SELECT
	COALESCE(SUM(CASE WHEN status = 'NEW' THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN status = 'SENDING' THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN status = 'DEAD' THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN status = 'NEW' AND attempts > 0 THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN status = 'SENDING' AND `+leaseExpired("")+` THEN 1 ELSE 0 END), 0),
	COUNT(DISTINCT CASE WHEN status = 'DEAD' AND event_key <> '' THEN event_key END),
	COALESCE(SUM(CASE WHEN status = 'NEW' AND next_attempt_at >= NOW(6) + INTERVAL 1 YEAR THEN 1 ELSE 0 END), 0),
	MIN(CASE WHEN status <> 'DEAD' THEN UNIX_TIMESTAMP(created_at) END),
	`+dbNow+`
FROM `+s.table).Scan(&st.New, &st.Sending, &st.Dead, &st.Retrying, &st.ExpiredLeases, &st.BlockedKeys, &st.HeldForGood, &oldest, &now)
	if err != nil {
		return st, wrap("stats", err)
	}
	if t, err := epoch(oldest); err != nil {
		return st, err
	} else if !t.IsZero() {
		st.OldestPending = max(time.UnixMicro(now).Sub(t), 0)
	}
	if s.opts.KeepSent {
		if err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+s.archive).Scan(&st.Sent); err != nil {
			return st, wrap("stats", err)
		}
	}
	return st, nil
}
