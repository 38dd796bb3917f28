package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/driver"
)

// Ordering by ownership (driver.Driver) on SQLite.
//
// SQLite has one writer per file and runs inside the application, so it
// has one shard, where PostgreSQL and MariaDB have 64: Balance gives it to
// one relay at a time, and the other relays of the same file wait and take
// it over when the holder's lease runs out or it leaves. Spreading keys
// over shards would buy nothing here: every claim, ack and retry takes the
// same write lock. This is the dialect difference; the rules are the same.
//
// A claim has two phases. First, plain reads (WAL: they wait for no
// writer): it returns at once while another owner's claim is live (the
// previous holder's, before its lease ran out), then walks the expired
// claims and the NEW, not parked rows together in id order, through
// partial indexes. A keyed row behind an earlier row of its key that waits
// for a retry or a delayed AvailableAt, is DEAD (HoldDeadKeys) or parked
// is to be parked (at most parkBound per claim); a NEW row behind an
// expired claim of its key is read past, and so is every row of a key
// after one the walk left out; the rest is a candidate, also when the
// owner's own earlier events of the key are still in flight: the relay
// orders them. Then one short write transaction checks again that the
// owner holds the shard and that no other owner's claim is live, and takes
// the candidates that every rule still allows. Between the phases no other
// owner's claim comes back to life and no other owner gives an event back:
// Extend, Retry, Bury and Release need a live lease and no other relay
// holding the shard, and a new claim needs the shard. (An Extend that
// committed before this owner took the shard is seen by the first read.)
// So another owner can only ack (delete) rows; the owner's own outcomes
// are ordered by the relay.

// writeTx runs fn in a transaction under the write gate, with prepared
// statements from the store's cache (compiling a statement costs SQLite
// more than running it). fn's first statement must write, so that the
// transaction takes the write lock before it reads anything, whatever the
// _txlock setting of the caller's *sql.DB.
func (s *Store) writeTx(ctx context.Context, op string, fn func(q func(query string) (*sql.Stmt, error)) error) error {
	if err := s.gate.lock(ctx); err != nil {
		return wrap(op, err)
	}
	defer s.gate.unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return wrap(op, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	// A statement not in the cache yet is prepared on the transaction's
	// connection, and cached after the commit: preparing it on the pool
	// would need another connection, which waits for this transaction's
	// lock where the journal is not WAL (in-memory databases).
	var warm []string
	q := func(query string) (*sql.Stmt, error) {
		s.stmtMu.Lock()
		st := s.stmts[query]
		s.stmtMu.Unlock()
		if st == nil {
			warm = append(warm, query)
			return tx.PrepareContext(ctx, query)
		}
		return tx.StmtContext(ctx, st), nil
	}
	if err := fn(q); err != nil {
		return wrap(op, err)
	}
	if err := tx.Commit(); err != nil {
		return wrap(op, err)
	}
	for _, query := range warm {
		_, _ = s.stmt(ctx, query)
	}
	return nil
}

// shardCount is SQLite's number of shards.
const shardCount = 1

// parkBound is the most rows one claim parks; unparkBound the most rows one
// statement unparks.
const (
	parkBound   = 1000
	unparkBound = 1000
)

var _ driver.Driver = (*Store)(nil)

func (s *Store) shardsTable() string { return quote(s.opts.Table + "_shards") }
func (s *Store) relaysTable() string { return quote(s.opts.Table + "_relays") }

// Balance heartbeats req.Owner, renews its shard, gives it up when asked
// (Release or Leave), and takes it when it is free or its lease ran out.
// With one shard the fair share of every relay is at most one, so a held
// shard is never marked Revoke: it changes hands when its holder leaves or
// stalls. Balance also unparks rows whose key holds nothing any more, so a
// parked row can never be forgotten.
func (s *Store) Balance(ctx context.Context, req driver.BalanceParams) (driver.Ownership, error) {
	req = req.WithDefaults()
	if err := req.Validate(shardCount); err != nil {
		return driver.Ownership{}, fmt.Errorf("sqlitestore: balance: %w", err)
	}
	own := driver.Ownership{Shards: shardCount}
	lease := req.LeaseFor.Microseconds()
	sh, rl := s.shardsTable(), s.relaysTable()
	err := s.writeTx(ctx, "balance", func(q func(string) (*sql.Stmt, error)) error {
		exec := func(query string, args ...any) error {
			st, err := q(query)
			if err == nil {
				_, err = st.ExecContext(ctx, args...)
			}
			return err
		}
		row := func(query string, dst []any, args ...any) error {
			st, err := q(query)
			if err == nil {
				err = st.QueryRowContext(ctx, args...).Scan(dst...)
			}
			return err
		}
		var now int64
		if req.Leave {
			// the first statement writes: the write lock comes first
			if err := exec("DELETE FROM "+rl+" WHERE owner = ?", req.Owner); err != nil {
				return err
			}
			if err := row("SELECT "+nowUS, []any{&now}); err != nil {
				return err
			}
			if err := exec("UPDATE "+sh+" SET owner = '', lease_until = 0 WHERE owner = ?", req.Owner); err != nil {
				return err
			}
		} else {
			if err := row("INSERT INTO "+rl+" (owner, lease_until) VALUES (?1, "+nowUS+" + ?2) ON CONFLICT (owner) DO UPDATE SET lease_until = excluded.lease_until RETURNING lease_until - ?2",
				[]any{&now}, req.Owner, lease); err != nil {
				return err
			}
			if len(req.Release) > 0 {
				if err := exec("UPDATE "+sh+" SET owner = '', lease_until = 0 WHERE owner = ?1 AND shard IN (SELECT value FROM json_each(?2))", req.Owner, intsJSON(req.Release)); err != nil {
					return err
				}
			}
			// Renew what is still ours, then take what is free or
			// expired up to the fair share.
			if err := exec("UPDATE "+sh+" SET lease_until = ?2 WHERE owner = ?1", req.Owner, now+lease); err != nil {
				return err
			}
		}
		if err := exec("DELETE FROM "+rl+" WHERE lease_until <= ?", now); err != nil {
			return err
		}
		if err := row("SELECT count(*) FROM "+rl, []any{&own.Relays}); err != nil {
			return err
		}
		if !req.Leave {
			share := (shardCount + max(own.Relays, 1) - 1) / max(own.Relays, 1)
			var mine int
			if err := row("SELECT count(*) FROM "+sh+" WHERE owner = ?", []any{&mine}, req.Owner); err != nil {
				return err
			}
			if mine < share {
				if err := exec("UPDATE "+sh+" SET owner = ?1, epoch = epoch + 1, lease_until = ?2 WHERE shard IN (SELECT shard FROM "+sh+" WHERE owner = '' OR lease_until <= ?3 ORDER BY shard LIMIT ?4)",
					req.Owner, now+lease, now, share-mine); err != nil {
					return err
				}
			}
			st, err := q("SELECT shard, epoch FROM " + sh + " WHERE owner = ? ORDER BY shard")
			if err != nil {
				return err
			}
			rows, err := st.QueryContext(ctx, req.Owner)
			if err != nil {
				return err
			}
			for rows.Next() {
				var l driver.ShardLease
				if err := rows.Scan(&l.Shard, &l.Epoch); err != nil {
					rows.Close()
					return err
				}
				own.Held = append(own.Held, l)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			own.Until = micros(now + lease)
		}
		return exec(s.sweepSQL(), unparkBound)
	})
	if err != nil {
		return driver.Ownership{Shards: shardCount}, err
	}
	return own, nil
}

// sweepSQL unparks the lowest parked row of each key whose key has no
// earlier row that will unpark it when it moves on (a leased row, a
// delayed or retrying one): a key whose blocking row went away without
// unparking it (or is DEAD: the next claim parks it again if the relay
// holds dead keys) gets its head back in the claim index. ?1 bounds it.
func (s *Store) sweepSQL() string {
	t := s.table
	return `UPDATE ` + t + ` SET parked = 0 WHERE id IN (
	SELECT m.id FROM (SELECT event_key, min(id) AS id FROM ` + t + ` WHERE parked = 1 GROUP BY event_key) AS m
	WHERE NOT EXISTS (SELECT 1 FROM ` + t + ` AS h WHERE h.status = 'SENDING' AND h.event_key = m.event_key AND h.id < m.id)
	  AND NOT EXISTS (SELECT 1 FROM ` + t + ` AS h WHERE h.status = 'NEW' AND h.next_attempt_at > h.created_at AND h.event_key = m.event_key AND h.id < m.id)
	LIMIT ?1)`
}

// expiredBefore is "an earlier row of o's key is SENDING under a lease
// that ran out at ?1, or under none" (and extra). It is two probes, each
// one range of the sending index (event_key, lease_until): written as one
// EXISTS with "lease_until IS NULL OR lease_until <= ?1", SQLite reads
// every in-flight entry of the key, live ones included, for each candidate.
func (s *Store) expiredBefore(extra string) string {
	probe := func(lease string) string {
		return "EXISTS (SELECT 1 FROM " + s.table + " AS h WHERE h.status = 'SENDING' AND h.event_key = o.event_key AND " + lease + " AND h.id < o.id" + extra + ")"
	}
	return "(" + probe("h.lease_until IS NULL") + " OR " + probe("h.lease_until <= ?1") + ")"
}

// heldSQL is the condition that the keyed row o is held by an earlier row
// of its key: DEAD (when deadHolds, an SQL boolean, is true), delayed and
// not due at now (microseconds since 1970), or parked.
func (s *Store) heldSQL(now, deadHolds string) string {
	t := s.table
	return `o.event_key <> '' AND (
		EXISTS (SELECT 1 FROM ` + t + ` AS h WHERE h.status = 'DEAD' AND h.event_key = o.event_key AND h.id < o.id AND ` + deadHolds + `)
		OR EXISTS (SELECT 1 FROM ` + t + ` AS h WHERE h.status = 'NEW' AND h.next_attempt_at > h.created_at AND h.event_key = o.event_key AND h.id < o.id AND h.next_attempt_at > ` + now + `)
		OR EXISTS (SELECT 1 FROM ` + t + ` AS h WHERE h.parked = 1 AND h.event_key = o.event_key AND h.id < o.id))`
}

// candidateSQL reads a page of claim candidates with what holds them: ?1
// the claim's now (µs), ?2 HoldDeadKeys, ?3 owner, ?4 the last id read, ?5
// the page size. park: an earlier row of the key is delayed and not due,
// DEAD (held), or parked. wait: an earlier row of the key is leased under
// an expired claim (the claim runs only when no other owner's claim is
// live, so that is the only lease that is not this owner's live one; the
// probe reads only expired entries of the key). due: the row itself is
// due. Last, the payload's length in bytes: length() of a BLOB reads the
// stored size, not the payload; a payload a plain-SQL producer stored as
// TEXT is measured as its bytes too (length() of TEXT counts characters).
// ?3 (owner) is unused.
func (s *Store) candidateSQL(from string) string {
	return `SELECT o.id, o.event_key, o.status = 'SENDING', (o.next_attempt_at <= ?1 OR o.next_attempt_at <= o.created_at),
	` + s.heldSQL("?1", "?2") + `,
	o.event_key <> '' AND ` + s.expiredBefore("") + `,
	CASE typeof(o.payload) WHEN 'text' THEN length(CAST(o.payload AS BLOB)) ELSE length(o.payload) END
FROM ` + from + ` AND o.id > ?4 ORDER BY o.id LIMIT ?5`
}

// Claim claims from the one shard when req.Shards names it under the
// epoch the owner still holds and no other owner's claim is live; see the
// comment at the top of this file. An empty req.Shards claims nothing; a
// shard the owner no longer holds is an error wrapping driver.ErrLeaseLost
// (the relay's view is stale: it heartbeats).
func (s *Store) Claim(ctx context.Context, req driver.ClaimParams) (driver.Claim, error) {
	req = req.WithDefaults()
	c := driver.Claim{Lease: req.Lease}
	if len(req.Shards) == 0 {
		return c, nil
	}
	epoch := int64(-1)
	for _, l := range req.Shards {
		if l.Shard == 0 {
			epoch = l.Epoch
		}
	}
	if epoch < 0 {
		return c, fmt.Errorf("sqlitestore: claim: SQLite has one shard, 0; none of %v is held: %w", req.Shards, driver.ErrLeaseLost)
	}
	// Phase 1, a plain read (WAL: it waits for no writer, and no writer
	// for it): the candidates, and the rows to park. The scan reads past
	// delayed heads and parks what is held, so it is the long part.
	readNow, err := s.now(ctx)
	if err != nil {
		return c, fmt.Errorf("sqlitestore: claim: %w (%w)", err, driver.ErrNothingClaimed)
	}
	// First, before the walk: no other owner's claim is live. One that is
	// could give a key's first event back (Release needs a live lease)
	// after the walk read past it, and the second phase would then take
	// the key's later events without it. Once none is live, none comes
	// back to life (Extend and Release need a live lease, and a claim
	// needs the shard), so the walk's reads see the other owners' rows as
	// they stay, but for acks.
	live, err := s.stmt(ctx, s.otherLiveSQL())
	if err != nil {
		return c, fmt.Errorf("sqlitestore: claim: %w (%w)", err, driver.ErrNothingClaimed)
	}
	var other int
	if err := live.QueryRowContext(ctx, readNow, req.Lease.Owner).Scan(&other); err != nil {
		return c, fmt.Errorf("sqlitestore: claim: %w (%w)", err, driver.ErrNothingClaimed)
	}
	if other > 0 {
		return c, nil // the previous holder's claims are still live
	}
	take, park, err := s.scanOwned(ctx, func(q string) (*sql.Stmt, error) { return s.stmt(ctx, q) }, req, readNow)
	if err != nil {
		return c, fmt.Errorf("sqlitestore: claim: %w (%w)", err, driver.ErrNothingClaimed)
	}
	if afterWalk != nil {
		afterWalk()
	}
	if len(take) == 0 && len(park) == 0 {
		return c, nil
	}
	// Phase 2, one short write transaction: the shard is still ours and no
	// other owner's claim is live; then every rule is applied again to the
	// candidates (ids are assigned under the write lock, so no earlier row
	// of a candidate's key can appear in between, and a row that changed
	// meanwhile is left alone).
	var lost bool
	var bad map[int64]error
	err = s.writeTx(ctx, "claim", func(q func(string) (*sql.Stmt, error)) error {
		// the first statement writes (a no-op update), so the write
		// lock comes first; it checks that the shard is still ours
		st, err := q("UPDATE " + s.shardsTable() + " SET epoch = epoch WHERE shard = 0 AND owner = ?1 AND epoch = ?2 AND lease_until > " + nowUS + " RETURNING " + nowUS)
		if err != nil {
			return err
		}
		var now int64
		err = st.QueryRowContext(ctx, req.Lease.Owner, epoch).Scan(&now)
		if errors.Is(err, sql.ErrNoRows) {
			lost = true // the shard changed hands or its lease ran out
			return nil
		}
		if err != nil {
			return err
		}
		if st, err = q(s.otherLiveSQL()); err != nil {
			return err
		}
		var other int
		if err := st.QueryRowContext(ctx, now, req.Lease.Owner).Scan(&other); err != nil {
			return err
		}
		if other > 0 {
			return nil // the previous holder's claims are still live
		}
		if len(take) > 0 {
			if st, err = q(s.takeSQL()); err != nil {
				return err
			}
			rows, err := st.QueryContext(ctx, now, req.HoldDeadKeys, idsJSON(take), req.Lease.Owner, req.Lease.Epoch, now+req.LeaseFor.Microseconds())
			if err != nil {
				return err
			}
			for rows.Next() {
				e, until, broken, err := scanClaimed(rows)
				if err != nil {
					rows.Close()
					return err
				}
				if broken != nil {
					if bad == nil {
						bad = map[int64]error{}
					}
					bad[e.ID] = broken
				}
				c.Until = micros(until)
				c.Events = append(c.Events, e)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		if len(park) > 0 {
			// after the claim's update, which applies the rules to the
			// state before it; a row parked that its blocker left
			// meanwhile is unparked by that blocker's ack or the sweep
			if st, err = q("UPDATE " + s.table + " SET parked = 1 WHERE " + inIDs + " AND status = 'NEW'"); err != nil {
				return err
			}
			if _, err := st.ExecContext(ctx, idsJSON(park)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		// One transaction in a local file: when it fails, nothing of it
		// committed (database/sql rolls it back, and a failed COMMIT
		// leaves the file as it was).
		return driver.Claim{Lease: req.Lease}, fmt.Errorf("%w (%w)", err, driver.ErrNothingClaimed)
	}
	if lost {
		return c, fmt.Errorf("sqlitestore: claim: shard 0 is no longer held by %s under epoch %d: %w", req.Lease.Owner, epoch, driver.ErrLeaseLost)
	}
	if len(c.Events) == 0 {
		return c, nil
	}
	sort.Slice(c.Events, func(i, j int) bool { return c.Events[i].ID < c.Events[j].ID })
	if err = driver.ScreenClaim(ctx, &c, bad, req.HoldDeadKeys, s.Bury, s.Release); err != nil {
		return driver.Claim{Lease: req.Lease}, fmt.Errorf("sqlitestore: claim: %w", err)
	}
	return c, nil
}

// scanOwned reads the candidates of a claim at now, through prepared
// statements from q: the rows to take and the rows to park. See
// candidateSQL.
//
// It walks the expired claims (to take over) and the NEW rows together,
// in id order, so that whatever cuts the claim cuts one prefix of each
// key: a key's first event released by a relay that then died before it
// settled the key's later ones is NEW below their expired claims, and
// comes first. Once a keyed row is left out (held, not due, behind an
// expired claim of its key, or past the cut), every later row of its key
// is left out too. It stops taking at Limit rows, or before the row that
// would take the payload bytes past MaxBytes (never before the first).
func (s *Store) scanOwned(ctx context.Context, q func(string) (*sql.Stmt, error), req driver.ClaimParams, now int64) (take, park []int64, err error) {
	var bytes int64
	cut := false // MaxBytes stopped the claim
	full := func() bool { return cut || len(take) >= req.Limit }
	left := map[string]bool{} // keys with a row left out
	decide := func(c candidate) {
		switch {
		case full():
		case c.held && !c.sending:
			left[c.key] = true
			if len(park) < parkBound {
				park = append(park, c.id)
			}
		case c.key != "" && left[c.key]:
		case c.held || !c.due || (c.wait && !c.sending):
			// a delayed head (read past while not due), an expired
			// claim whose key is held, or a NEW row behind an expired
			// claim of its key (the next claim takes it, once that
			// claim is taken over)
			if c.key != "" {
				left[c.key] = true
			}
		case req.MaxBytes > 0 && len(take) > 0 && bytes+c.size > req.MaxBytes:
			cut = true
		default:
			take = append(take, c.id)
			bytes += c.size
		}
	}
	bound := req.Limit + parkBound + 4*req.Limit // rows read per kind
	expired, err := s.readCandidates(ctx, q, s.table+` AS o INDEXED BY "`+s.opts.Table+`_sending_idx" WHERE o.status = 'SENDING' AND `+leaseExpired("o.", "?1"), req, now, bound)
	if err != nil {
		return nil, nil, err
	}
	next := 0
	unread, err := s.candidates(ctx, q, s.table+` AS o INDEXED BY "`+s.opts.Table+`_ready_idx" WHERE o.status = 'NEW' AND o.parked = 0`, req, now, bound, func(c candidate) bool {
		for ; next < len(expired) && expired[next].id < c.id; next++ {
			decide(expired[next])
		}
		decide(c)
		return !full()
	})
	if err != nil {
		return nil, nil, err
	}
	for ; next < len(expired); next++ {
		if e := expired[next]; unread != nil && e.key != "" && e.id > *unread {
			// the NEW rows past the bound were not read: one of its
			// key may come before it, so it waits for a later claim
			left[e.key] = true
			continue
		}
		decide(expired[next])
	}
	return take, park, nil
}

// candidate is one row a claim's walk reads (candidateSQL).
type candidate struct {
	id                 int64
	key                string
	sending, due, held bool
	wait               bool
	size               int64
}

// readCandidates reads the rows of from in id order, at most bound of
// them, a page at a time, into the result.
func (s *Store) readCandidates(ctx context.Context, q func(string) (*sql.Stmt, error), from string, req driver.ClaimParams, now int64, bound int) ([]candidate, error) {
	var out []candidate
	_, err := s.candidates(ctx, q, from, req, now, bound, func(c candidate) bool {
		out = append(out, c)
		return true
	})
	return out, err
}

// candidates hands the rows of from to each in id order (it returns false
// to stop), at most about bound of them, a page at a time. unread is the
// last id read when the bound stopped the read before the rows ran out
// (nil otherwise).
func (s *Store) candidates(ctx context.Context, q func(string) (*sql.Stmt, error), from string, req driver.ClaimParams, now int64, bound int, each func(candidate) bool) (unread *int64, err error) {
	st, err := q(s.candidateSQL(from))
	if err != nil {
		return nil, err
	}
	after, read := int64(math.MinInt64), 0 // a plain-SQL producer may give an id below 1
	for {
		if read >= bound {
			return &after, nil
		}
		page := req.Limit + 64
		rows, err := st.QueryContext(ctx, now, req.HoldDeadKeys, req.Lease.Owner, after, page)
		if err != nil {
			return nil, err
		}
		n, stop := 0, false
		for rows.Next() {
			var c candidate
			if err := rows.Scan(&c.id, &c.key, &c.sending, &c.due, &c.held, &c.wait, &c.size); err != nil {
				rows.Close()
				return nil, err
			}
			n++
			read++
			after = c.id
			if !each(c) {
				stop = true
				break
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if stop || n < page {
			return nil, nil
		}
	}
}

// afterWalk, when set (tests only), runs between a claim's two phases.
var afterWalk func()

// otherLiveSQL counts (0 or 1) the live claims of owners other than ?2 at
// ?1.
func (s *Store) otherLiveSQL() string {
	return "SELECT count(*) FROM (SELECT 1 FROM " + s.table + " WHERE status = 'SENDING' AND lease_until > ?1 AND lease_owner <> ?2 LIMIT 1)"
}

// takeSQL claims the candidates ?3 (a JSON array) that are still
// claimable at ?1 (HoldDeadKeys ?2) for owner ?4, epoch ?5, until ?6, and
// returns them. The rules are those of candidateSQL; the IN subquery is
// evaluated in full before any row changes, so candidates do not hold
// each other.
func (s *Store) takeSQL() string {
	t := s.table
	return `UPDATE ` + t + ` SET status = 'SENDING', lease_owner = ?4, lease_epoch = ?5, lease_until = ?6, parked = 0
WHERE id IN (SELECT o.id FROM ` + t + ` AS o WHERE o.id IN (SELECT value FROM json_each(?3))
	AND ((o.status = 'NEW' AND o.parked = 0 AND (o.next_attempt_at <= ?1 OR o.next_attempt_at <= o.created_at)) OR (o.status = 'SENDING' AND ` + leaseExpired("o.", "?1") + `))
	AND (o.event_key = '' OR (
		NOT EXISTS (SELECT 1 FROM ` + t + ` AS h WHERE h.status = 'DEAD' AND h.event_key = o.event_key AND h.id < o.id AND ?2)
		AND NOT EXISTS (SELECT 1 FROM ` + t + ` AS h WHERE h.status = 'NEW' AND h.next_attempt_at > h.created_at AND h.event_key = o.event_key AND h.id < o.id AND h.next_attempt_at > ?1)
		AND NOT EXISTS (SELECT 1 FROM ` + t + ` AS h WHERE h.parked = 1 AND h.event_key = o.event_key AND h.id < o.id)
		AND (o.status = 'SENDING' OR NOT ` + s.expiredBefore(" AND h.id NOT IN (SELECT value FROM json_each(?3))") + `))))
RETURNING ` + eventCols + `, lease_until`
}

// scanClaimed reads one row of a claim's RETURNING (eventCols, lease_until).
// broken says why the row breaks the table contract (it is claimed all the
// same, and buried under the claim's lease).
func scanClaimed(rows *sql.Rows) (e outbox.Event, until int64, broken error, err error) {
	var headers []byte
	// SQLite keeps what a producer wrote: text in an INTEGER column
	// stays text (values.go)
	var version, attempts, created any
	if err = rows.Scan(&e.ID, &e.EventID, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &version, &e.Payload, &e.ContentType, &headers, &attempts, &created, &until); err != nil {
		return e, 0, nil, err
	}
	e.SchemaVersion, broken = schemaVersion(version)
	if h, herr := driver.DecodeHeaders(headers); herr != nil {
		broken = herr
	} else {
		e.Headers = h
	}
	n, aerr := integer("attempts", attempts, math.MinInt64, math.MaxInt64)
	e.Attempts = int(min(max(n, 0), math.MaxInt32))
	us, cerr := integer("created_at", created, math.MinInt64, math.MaxInt64)
	e.CreatedAt = micros(us)
	if broken == nil {
		broken = cmp.Or(aerr, cerr)
	}
	return e, until, broken, nil
}

// unparkSQL unparks, for each key in the JSON array ?1, its lowest ?2
// parked rows: their blocking row moved on, and the next claim decides
// again (it parks them anew if the key is still held).
func (s *Store) unparkSQL() string {
	return `UPDATE ` + s.table + ` SET parked = 0 WHERE id IN (
	SELECT p.id FROM (SELECT DISTINCT value AS k FROM json_each(?1)) AS keys, ` + s.table + ` AS p
	WHERE p.id IN (SELECT q.id FROM ` + s.table + ` AS q WHERE q.parked = 1 AND q.event_key = keys.k ORDER BY q.id LIMIT ?2))`
}

// anyParkedSQL is the cheap guard before unparking: one probe of the
// parked index.
func (s *Store) anyParkedSQL() string {
	return `SELECT EXISTS (SELECT 1 FROM ` + s.table + ` WHERE parked = 1)`
}

// unpark unparks the lowest parked rows of keys (see unparkSQL), through
// ex (the store's db, or the transaction of the write that moved the
// blocking rows on). Parking is a cache: an unpark that fails only delays
// rows until Balance's sweep.
func (s *Store) unpark(ctx context.Context, ex interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	var some bool
	if err := ex.QueryRowContext(ctx, s.anyParkedSQL()).Scan(&some); err != nil || !some {
		return err
	}
	js, err := json.Marshal(keys)
	if err != nil {
		return err
	}
	_, err = ex.ExecContext(ctx, s.unparkSQL(), string(js), unparkBound)
	return err
}

// keyed collects the non-empty keys a RETURNING event_key hands back.
type keyed struct {
	keys []string
	seen map[string]bool
	n    int // rows, keyed or not
}

func (k *keyed) scan(rows *sql.Rows) error {
	var key string
	if err := rows.Scan(&key); err != nil {
		return err
	}
	k.n++
	if key != "" && !k.seen[key] {
		if k.seen == nil {
			k.seen = map[string]bool{}
		}
		k.seen[key] = true
		k.keys = append(k.keys, key)
	}
	return nil
}

// intsJSON encodes ints for json_each.
func intsJSON(v []int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, x := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, x)
	}
	b.WriteByte(']')
	return b.String()
}
