package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/outbox-go/outbox/store/driver"
)

// maxIDsPerStatement keeps id lists well under the placeholder limit.
const maxIDsPerStatement = 10000

func chunks(ids []int64, size int) [][]int64 {
	var out [][]int64
	for len(ids) > size {
		out = append(out, ids[:size])
		ids = ids[size:]
	}
	return append(out, ids)
}

func marks(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?,", n-1) + "?"
}

func appendIDs(args []any, ids []int64) []any {
	for _, id := range ids {
		args = append(args, id)
	}
	return args
}

// byID follows a table name in statements that address rows by id: with
// few SENDING rows the optimizers may otherwise prefer the hold index's
// status='SENDING' range, which at REPEATABLE READ would lock every
// in-flight row of every relay for the statement. Single-table DELETE takes
// no index hint, so Ack uses the multi-table form.
const byID = " FORCE INDEX (PRIMARY)"

// leaseCheck is the compare-and-swap every state change does (arguments
// owner, epoch).
const leaseCheck = " AND status = 'SENDING' AND lease_owner = ? AND lease_epoch = ?"

// exec runs one autocommitted statement, again when InnoDB chose it as a
// deadlock's victim (it was rolled back, so running it again is safe): an
// owned claim locks the in-flight rows it takes over through the busy
// index, a settle through the primary key.
func (s *Store) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	for tries := 1; ; tries++ {
		res, err := s.db.ExecContext(ctx, q, args...)
		if !deadlock(err) || tries == maxDeadlockRetries || ctx.Err() != nil {
			return res, err
		}
	}
}

// leased runs one autocommitted statement per chunk of ids and reports
// ErrLeaseLost when fewer rows than asked were affected. Every statement
// given here changes each row it matches (status or existence), so
// RowsAffected counts matches whether or not the DSN sets clientFoundRows.
func (s *Store) leased(ctx context.Context, op string, want int, build func(ids []int64) (string, []any), ids []int64) error {
	var done int64
	for _, part := range chunks(ids, maxIDsPerStatement) {
		q, args := build(part)
		res, err := s.exec(ctx, q, args...)
		if err != nil {
			return wrap(op, err)
		}
		n, _ := res.RowsAffected()
		done += n
	}
	if done < int64(want) {
		return fmt.Errorf("mysqlstore: %s: %d of %d events: %w", op, int64(want)-done, want, driver.ErrLeaseLost)
	}
	return nil
}

// Extend renews the lease on ids until now+d (database clock): one UPDATE,
// then a read of the new expiry.
func (s *Store) Extend(ctx context.Context, p driver.ExtendParams) (time.Time, error) {
	lease, ids, d := p.Lease, p.IDs, p.For
	if len(ids) == 0 {
		return time.Time{}, nil
	}
	var changed int64
	for _, part := range chunks(ids, maxIDsPerStatement) {
		args := appendIDs([]any{d.Microseconds()}, part)
		res, err := s.exec(ctx, "UPDATE "+s.table+byID+" SET lease_until = NOW(6) + INTERVAL ? MICROSECOND WHERE id IN ("+marks(len(part))+")"+leaseCheck+" AND lease_until > NOW(6)",
			append(args, lease.Owner, lease.Epoch)...)
		if err != nil {
			return time.Time{}, wrap("extend", err)
		}
		n, _ := res.RowsAffected()
		changed += n
	}
	// Without clientFoundRows MySQL counts changed rows only, and a row
	// whose lease_until already had the new value is not "changed": when
	// the count falls short, count the rows still held under a live lease.
	live := ""
	if changed < int64(len(ids)) {
		live = " AND lease_until > NOW(6)"
	}
	var held int64
	var minUntil sql.NullString
	for _, part := range chunks(ids, maxIDsPerStatement) {
		var n int64
		var u sql.NullString
		err := s.db.QueryRowContext(ctx, "SELECT COUNT(*), MIN(UNIX_TIMESTAMP(lease_until)) FROM "+s.table+byID+" WHERE id IN ("+marks(len(part))+")"+leaseCheck+live,
			append(appendIDs(nil, part), lease.Owner, lease.Epoch)...).Scan(&n, &u)
		if err != nil {
			return time.Time{}, wrap("extend", err)
		}
		held += n
		if u.Valid && (!minUntil.Valid || u.String < minUntil.String) {
			minUntil = u
		}
	}
	if held < int64(len(ids)) {
		return time.Time{}, fmt.Errorf("mysqlstore: extend: %d of %d events: %w", int64(len(ids))-held, len(ids), driver.ErrLeaseLost)
	}
	return epoch(minUntil)
}

// archiveCols are copied from the outbox to the archive on Ack.
const archiveCols = "id, event_id, topic, event_key, event_type, aggregate_type, schema_version, payload, content_type, headers, attempts, next_attempt_at, last_error, lease_owner, lease_epoch, lease_until, created_at"

// Ack deletes ids, or with KeepSent copies them to the archive as SENT and
// then deletes them. Both are single autocommitted statements, never one
// transaction holding row locks across a pause of this process: if it dies
// between the two, the rows stay SENDING, are claimed again after the lease
// and re-archived over their earlier copy.
func (s *Store) Ack(ctx context.Context, p driver.AckParams) error {
	lease, ids := p.Lease, p.IDs
	if len(ids) == 0 {
		return nil
	}
	if s.opts.KeepSent {
		for _, part := range chunks(ids, maxIDsPerStatement) {
			_, err := s.exec(ctx, "INSERT INTO "+s.archive+" ("+archiveCols+", status, sent_at) SELECT "+archiveCols+", 'SENT', NOW(6) FROM "+s.table+byID+
				" WHERE id IN ("+marks(len(part))+")"+leaseCheck+" ON DUPLICATE KEY UPDATE "+s.archive+".sent_at = NOW(6)",
				append(appendIDs(nil, part), lease.Owner, lease.Epoch)...)
			if err != nil {
				return wrap("ack", err)
			}
		}
	}
	var keys []string
	for _, part := range chunks(ids, maxIDsPerStatement) {
		k, err := s.parkedKeys(ctx, byID, "o.id IN ("+marks(len(part))+")", appendIDs(nil, part)...)
		if err != nil {
			return wrap("ack", err)
		}
		keys = append(keys, k...)
	}
	err := s.leased(ctx, "ack", len(ids), func(part []int64) (string, []any) {
		return "DELETE o FROM " + s.table + " o" + byID + " WHERE id IN (" + marks(len(part)) + ")" + leaseCheck,
			append(appendIDs(nil, part), lease.Owner, lease.Epoch)
	}, ids)
	if uerr := s.unparkKeys(ctx, keys); uerr != nil && err == nil {
		// The acks stand; Balance's sweep unparks what this missed.
		return wrap("ack: unpark", uerr)
	}
	return err
}

// AckClaim acks every event of the claim lease (driver.Driver): its rows
// are found by (owner, epoch) among the in-flight ones through the hold
// index, so no id list is sent. ErrLeaseLost when fewer than n are still
// held (the others are acked all the same).
func (s *Store) AckClaim(ctx context.Context, p driver.AckClaimParams) error {
	lease, n := p.Lease, p.N
	hint := s.forceHoldIdx()
	where := " WHERE status = 'SENDING' AND lease_owner = ? AND lease_epoch = ?"
	if s.opts.KeepSent {
		_, err := s.exec(ctx, "INSERT INTO "+s.archive+" ("+archiveCols+", status, sent_at) SELECT "+archiveCols+", 'SENT', NOW(6) FROM "+s.table+hint+
			where+" ON DUPLICATE KEY UPDATE "+s.archive+".sent_at = NOW(6)", lease.Owner, lease.Epoch)
		if err != nil {
			return wrap("ack", err)
		}
	}
	keys, err := s.parkedKeys(ctx, hint, "o.status = 'SENDING' AND o.lease_owner = ? AND o.lease_epoch = ?", lease.Owner, lease.Epoch)
	if err != nil {
		return wrap("ack", err)
	}
	res, err := s.exec(ctx, "DELETE o FROM "+s.table+" o"+hint+where, lease.Owner, lease.Epoch)
	if err != nil {
		return wrap("ack", err)
	}
	if err := s.unparkKeys(ctx, keys); err != nil {
		return wrap("ack: unpark", err)
	}
	if done, _ := res.RowsAffected(); done < int64(n) {
		return fmt.Errorf("mysqlstore: ack: %d of %d events: %w", int64(n)-done, n, driver.ErrLeaseLost)
	}
	return nil
}

// Retry gives events back for a later attempt. The lease must still be live.
// Per-row delays and errors come from a derived table of UNION ALL rows,
// which MySQL and MariaDB both accept in a multi-table UPDATE; STRAIGHT_JOIN
// makes it drive the join, one primary-key lookup per row.
func (s *Store) Retry(ctx context.Context, p driver.RetryParams) error {
	lease, retries := p.Lease, p.Retries
	if len(retries) == 0 {
		return nil
	}
	retry := make(map[int64]driver.Retry, len(retries))
	ids := make([]int64, len(retries))
	for i, r := range retries {
		ids[i] = r.ID
		if _, dup := retry[r.ID]; !dup {
			retry[r.ID] = r
		}
	}
	return s.leased(ctx, "retry", len(ids), func(part []int64) (string, []any) {
		var b strings.Builder
		args := make([]any, 0, len(part)*3+2)
		for i, id := range part {
			if i == 0 {
				b.WriteString("SELECT CAST(? AS SIGNED) AS id, CAST(? AS SIGNED) AS delay_us, CAST(? AS CHAR) AS err")
			} else {
				b.WriteString(" UNION ALL SELECT ?, ?, ?")
			}
			r := retry[id]
			args = append(args, id, max(r.Delay, 0).Microseconds(), driver.CleanError(r.Error))
		}
		return "UPDATE (" + b.String() + ") u STRAIGHT_JOIN " + s.table + " t" + byID + " ON t.id = u.id SET t.status = 'NEW', t.attempts = LEAST(t.attempts, 2147483646) + 1, t.next_attempt_at = NOW(6) + INTERVAL u.delay_us MICROSECOND, t.last_error = u.err, t.lease_owner = '', t.lease_until = NULL" +
			" WHERE t.status = 'SENDING' AND t.lease_owner = ? AND t.lease_epoch = ? AND t.lease_until > NOW(6)", append(args, lease.Owner, lease.Epoch)
	}, ids)
}

// Bury marks events DEAD with their reason. The lease must still be live.
func (s *Store) Bury(ctx context.Context, p driver.BuryParams) error {
	lease, burials := p.Lease, p.Burials
	if len(burials) == 0 {
		return nil
	}
	reason := make(map[int64]string, len(burials))
	ids := make([]int64, len(burials))
	for i, b := range burials {
		ids[i] = b.ID
		if _, dup := reason[b.ID]; !dup {
			reason[b.ID] = b.Error
		}
	}
	return s.unparkAfter(ctx, "bury", ids, func() error {
		return s.bury(ctx, lease, ids, reason)
	})
}

func (s *Store) bury(ctx context.Context, lease driver.Lease, ids []int64, reason map[int64]string) error {
	return s.leased(ctx, "bury", len(ids), func(part []int64) (string, []any) {
		var b strings.Builder
		args := make([]any, 0, len(part)*2+2)
		for i, id := range part {
			if i == 0 {
				b.WriteString("SELECT CAST(? AS SIGNED) AS id, CAST(? AS CHAR) AS err")
			} else {
				b.WriteString(" UNION ALL SELECT ?, ?")
			}
			args = append(args, id, driver.CleanError(reason[id]))
		}
		return "UPDATE (" + b.String() + ") u STRAIGHT_JOIN " + s.table + " t" + byID + " ON t.id = u.id SET t.status = 'DEAD', t.attempts = LEAST(t.attempts, 2147483646) + 1, t.last_error = u.err, t.lease_owner = '', t.lease_until = NULL" +
			" WHERE t.status = 'SENDING' AND t.lease_owner = ? AND t.lease_epoch = ? AND t.lease_until > NOW(6)", append(args, lease.Owner, lease.Epoch)
	}, ids)
}

// Release gives events back untouched. The lease must still be live.
func (s *Store) Release(ctx context.Context, p driver.ReleaseParams) error {
	lease, ids := p.Lease, p.IDs
	if len(ids) == 0 {
		return nil
	}
	return s.unparkAfter(ctx, "release", ids, func() error {
		return s.leased(ctx, "release", len(ids), func(part []int64) (string, []any) {
			return "UPDATE " + s.table + byID + " SET status = 'NEW', lease_owner = '', lease_until = NULL WHERE id IN (" + marks(len(part)) + ")" + leaseCheck + " AND lease_until > NOW(6)",
				append(appendIDs(nil, part), lease.Owner, lease.Epoch)
		}, ids)
	})
}

// unparkAfter runs a settle of ids that makes their keys move on (bury,
// release) and then unparks the rows parked behind those keys, as Ack
// does, so that they wait for no sweep: the next claim decides again
// whether anything still holds them.
func (s *Store) unparkAfter(ctx context.Context, op string, ids []int64, settle func() error) error {
	var keys []string
	for _, part := range chunks(ids, maxIDsPerStatement) {
		k, err := s.parkedKeys(ctx, byID, "o.id IN ("+marks(len(part))+")", appendIDs(nil, part)...)
		if err != nil {
			return wrap(op, err)
		}
		keys = append(keys, k...)
	}
	err := settle()
	if uerr := s.unparkKeys(ctx, keys); uerr != nil && err == nil {
		// The settle stands; Balance's sweep unparks what this missed.
		return wrap(op+": unpark", uerr)
	}
	return err
}
