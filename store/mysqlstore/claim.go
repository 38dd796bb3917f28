package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
)

// Columns as read back. Times are read as UNIX_TIMESTAMP(column): for a
// TIMESTAMP column that is its stored UTC value, whatever the session's
// time_zone and the driver's parseTime/loc.
var eventCols = []string{"id", "event_id", "topic", "event_key", "event_type", "aggregate_type", "schema_version", "payload", "content_type", "headers", "attempts", "UNIX_TIMESTAMP(%screated_at)"}
var recordCols = append(eventCols[:len(eventCols):len(eventCols)], "status", "last_error", "UNIX_TIMESTAMP(%snext_attempt_at)", "lease_owner", "UNIX_TIMESTAMP(%slease_until)", "UNIX_TIMESTAMP(%ssent_at)")

func cols(list []string, prefix string) string {
	out := make([]string, len(list))
	for i, c := range list {
		if strings.Contains(c, "%s") {
			out[i] = fmt.Sprintf(c, prefix)
		} else {
			out[i] = prefix + c
		}
	}
	return strings.Join(out, ", ")
}

// dbNow is the database clock in microseconds since the epoch. UNIX_TIMESTAMP()
// and NOW(6) both read the statement's start time; neither depends on the
// session's time zone (MICROSECOND of a local time equals that of UTC).
const dbNow = "UNIX_TIMESTAMP() * 1000000 + MICROSECOND(NOW(6))"

// claimable: a NEW event that is due, or a SENDING one whose lease ran out.
// A NEW event never delayed (next_attempt_at at most created_at) is due
// whatever NOW(6) says: see dueSQL. A SENDING row without a lease
// (lease_until NULL: a relay never writes one, a plain-SQL producer that
// sets the status does) is an expired lease: NULL <= NOW(6) is not true,
// so it would otherwise never be claimed, and since no live lease holds its
// key either, the key's later events would pass it.
const claimable = "((%[1]sstatus = 'NEW' AND (%[1]snext_attempt_at <= NOW(6) OR %[1]snext_attempt_at <= %[1]screated_at)) OR (%[1]sstatus = 'SENDING' AND (%[1]slease_until IS NULL OR %[1]slease_until <= NOW(6) - " + takeoverGrace + ")))"

// leaseExpired is the SQL of "the lease of SENDING row p ran out" at
// NOW(6): its lease_until has passed, or it has none (see claimable). On
// (busy, lease_until) it is one range per shard: InnoDB sorts NULL first.
func leaseExpired(p string) string {
	return "(" + p + "lease_until IS NULL OR " + p + "lease_until <= NOW(6))"
}

// takeoverGrace: a claim takes over only leases that expired longer ago
// than this, and a key stays held by an in-flight event that long after its
// lease ran out. A fenced write (retry, release, extend) checks its lease at
// its statement's start and then holds the row's lock; the grace keeps a
// claim from reading that row's lease as expired and taking the key's next
// event while the first is being put back. (pgstore also bounds those
// statements' run time; MySQL has no portable per-statement timeout for
// UPDATE, so here the grace alone makes the window a stall of more than
// 250 ms inside one short statement.)
const takeoverGrace = "INTERVAL 250000 MICROSECOND"

// forceHoldIdx is the hint that makes a query use the hold index, which
// leads with status and so also finds the in-flight rows.
func (s *Store) forceHoldIdx() string { return " FORCE INDEX (" + s.opts.Table + "_hold_idx)" }

// buildClaimSQL selects the events a claim takes: claimable, in id order,
// whose key is not held — exactly pgstore's rules. A key is held by a SENDING
// event under a live lease (all its events), with HoldDeadKeys by an earlier
// DEAD event, and by an earlier NEW event waiting for a retry or a delayed
// AvailableAt (hold_key is set only on those, see the schema).
//
// Each probe is a lookup on (status, hold_key) that reads just the holding
// rows of that key. "An earlier holding row" is written as MIN(id) < o.id so
// the subquery depends on the key alone: MariaDB then answers the rows of a
// key from its subquery cache, which matters when the walk passes a long
// held backlog of one key (EXPLAIN ANALYZE: 100k held rows, 2.0 s with
// per-row EXISTS, 0.7 s with this form; 1000 unheld rows of 400k: 40 ms).
// The index hints pin the plan those EXPLAINs showed: the walk in
// primary-key order, stopping after LIMIT rows, and the probes on the hold
// index; the probes sit under OR so neither optimizer turns them into joins
// over the whole table.
func (s *Store) buildClaimSQL(holdDead bool) string {
	hold := "FROM " + s.table + " h" + s.forceHoldIdx() + " WHERE h.hold_key = o.event_key AND "
	dead := ""
	if holdDead {
		dead = "\n\t\tOR IFNULL((SELECT MIN(h.id) " + hold + "h.status = 'DEAD'), o.id) < o.id"
	}
	return "SELECT " + cols(eventCols, "o.") + ", " + dbNow + `
FROM ` + s.table + ` o FORCE INDEX (PRIMARY)
WHERE ` + fmt.Sprintf(claimable, "o.") + `
  AND (o.event_key = '' OR NOT (
		EXISTS (SELECT 1 ` + hold + `h.status = 'SENDING' AND h.lease_until > NOW(6) - ` + takeoverGrace + `)` + dead + `
		OR IFNULL((SELECT MIN(h.id) ` + hold + `h.status = 'NEW' AND h.next_attempt_at > NOW(6)), o.id) < o.id))
ORDER BY o.id
LIMIT ?`
}

type scanner interface{ Scan(dest ...any) error }

// scanEvent reads one row into e. broken is why the row breaks the table
// contract (its headers cannot be decoded; e.Headers is then nil): the row
// was read, and the caller decides what to do with it.
func scanEvent(row scanner, e *outbox.Event, extra ...any) (broken, err error) {
	var headers []byte
	var created sql.NullString
	dest := append([]any{&e.ID, &e.EventID, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.SchemaVersion, &e.Payload, &e.ContentType, &headers, &e.Attempts, &created}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	if e.CreatedAt, err = epoch(created); err != nil {
		return nil, err
	}
	if e.Payload == nil {
		e.Payload = []byte{}
	}
	e.Headers, broken = store.DecodeHeaders(headers)
	return broken, nil
}

// epoch parses UNIX_TIMESTAMP's decimal text ("1700000000.123456"); NULL and
// 0 (MySQL's zero timestamp) are the zero time.
func epoch(v sql.NullString) (time.Time, error) {
	if !v.Valid {
		return time.Time{}, nil
	}
	secText, frac, _ := strings.Cut(v.String, ".")
	sec, err := strconv.ParseInt(secText, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("mysqlstore: bad timestamp %q", v.String)
	}
	var nsec int64
	if frac != "" {
		frac = (frac + "000000000")[:9]
		if nsec, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return time.Time{}, fmt.Errorf("mysqlstore: bad timestamp %q", v.String)
		}
	}
	if sec == 0 && nsec == 0 {
		return time.Time{}, nil
	}
	return time.Unix(sec, nsec), nil
}

// Claim takes up to req.Limit ready events in id order under a new lease.
//
// Claims of one table are serialized by a GET_LOCK held on a dedicated
// connection for two autocommitted statements: a plain (non-locking) SELECT
// of the candidates, which sees every committed claim because it starts after
// the previous holder's UPDATE committed, and an UPDATE by primary key that
// re-checks claimability, so an event acked or changed in between is
// skipped. The two run in one transaction that first locks every row of
// <table>_shards (FOR UPDATE): owned claims lock their owner's shard rows
// for their whole transaction, so an exclusion claim and an owned claim of
// this version exclude each other (a rolling upgrade from exclusion to
// ownership; owned claims of different relays still run side by side),
// and each sees what the other committed. Seven round trips: GET_LOCK,
// BEGIN, the shard lock, SELECT, UPDATE, COMMIT, and RELEASE_LOCK together
// with reading the stored lease expiry. No row lock outlives the claim, so
// nothing a claim does can stall another relay's ack or retry for long.
func (s *Store) Claim(ctx context.Context, req store.ClaimRequest) (store.Claim, error) {
	req = req.Normalize()
	c := store.Claim{Lease: req.Lease}
	l, err := s.lock(ctx, "claim", claimLockWait)
	if err != nil {
		return c, wrap("claim", err)
	}
	defer l.unlock("", nil) //nolint:errcheck // a failed release discards the connection, which releases the lock
	conn, err := l.conn.BeginTx(ctx, nil)
	if err != nil {
		return c, wrap("claim", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = conn.Rollback()
		}
	}()
	// A table migrated before ownership existed has no shard rows, and no
	// owned claims.
	if _, err := conn.ExecContext(ctx, "SELECT COUNT(*) FROM (SELECT shard FROM "+s.shardsTable()+" FOR UPDATE) x"); err != nil && !noTable(err) {
		return c, wrap("claim: lock shards", err)
	}

	q := s.claimSQL
	if req.HoldDeadKeys {
		q = s.claimHoldDeadSQL
	}
	rows, err := conn.QueryContext(ctx, q, req.Limit)
	if err != nil {
		return c, wrap("claim", err)
	}
	var events []outbox.Event
	var now int64
	var bad map[int64]error // rows that cannot be decoded, by id: claimed, then buried
	for rows.Next() {
		var e outbox.Event
		broken, err := scanEvent(rows, &e, &now)
		if err != nil {
			rows.Close()
			return c, wrap("claim", err)
		}
		if broken != nil {
			if bad == nil {
				bad = map[int64]error{}
			}
			bad[e.ID] = broken
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return c, wrap("claim", err)
	}
	if len(events) == 0 {
		committed = true
		return c, wrap("claim", conn.Commit())
	}

	ids := make([]int64, len(events))
	for i := range events {
		ids[i] = events[i].ID
	}
	var changed int64
	for _, part := range chunks(ids, maxIDsPerStatement) {
		args := []any{req.Lease.Owner, req.Lease.Epoch, req.LeaseFor.Microseconds()}
		res, err := conn.ExecContext(ctx, "UPDATE "+s.table+byID+" SET status = 'SENDING', lease_owner = ?, lease_epoch = ?, lease_until = NOW(6) + INTERVAL ? MICROSECOND WHERE id IN ("+marks(len(part))+") AND "+fmt.Sprintf(claimable, ""), appendIDs(args, part)...)
		if err != nil {
			return c, wrap("claim", err)
		}
		n, _ := res.RowsAffected()
		changed += n
	}
	if changed < int64(len(ids)) {
		// Rare: some candidates changed between the SELECT and the UPDATE
		// (acked by a relay whose lease had run out, say). Keep the ones
		// this lease now holds.
		held := map[int64]bool{}
		for _, part := range chunks(ids, maxIDsPerStatement) {
			rows, err := conn.QueryContext(ctx, "SELECT id FROM "+s.table+byID+" WHERE id IN ("+marks(len(part))+") AND status = 'SENDING' AND lease_owner = ? AND lease_epoch = ?", append(appendIDs(nil, part), req.Lease.Owner, req.Lease.Epoch)...)
			if err != nil {
				return c, wrap("claim", err)
			}
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return c, wrap("claim", err)
				}
				held[id] = true
			}
			if err := rows.Err(); err != nil {
				return c, wrap("claim", err)
			}
		}
		kept := events[:0]
		for _, e := range events {
			if held[e.ID] {
				kept = append(kept, e)
			}
		}
		events = kept
		if len(events) == 0 {
			committed = true
			return c, wrap("claim", conn.Commit())
		}
	}
	committed = true
	if err := conn.Commit(); err != nil {
		// Its outcome is unknown: the rows may be claimed under the lease
		// (their lease runs out; nothing is lost).
		return store.Claim{Lease: req.Lease}, wrap("claim: commit", err)
	}
	c.Events = events // already in id order
	// Release the lock and read the lease_until the UPDATE stored in one
	// round trip. Should that fail, the SELECT's clock plus LeaseFor is a
	// safe stand-in: a little before the stored expiry, never after it.
	var until sql.NullString
	c.Until = time.UnixMicro(now + req.LeaseFor.Microseconds())
	err = l.unlock(", (SELECT UNIX_TIMESTAMP(lease_until) FROM "+s.table+" WHERE id = ? AND lease_owner = ? AND lease_epoch = ?)",
		[]any{events[0].ID, req.Lease.Owner, req.Lease.Epoch}, &until)
	if t, terr := epoch(until); err == nil && terr == nil && !t.IsZero() {
		c.Until = t
	}
	if err = store.ScreenClaim(ctx, &c, bad, req.HoldDeadKeys, s.Bury, s.Release); err != nil {
		return store.Claim{Lease: req.Lease}, fmt.Errorf("mysqlstore: claim: %w", err)
	}
	return c, nil
}
