package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/driver"
)

// Ordering by ownership (driver.Driver) on MariaDB; the why is in doc.go.

// numShards is S, the number of shards of a table.
const numShards = 64

// shardSQL is the SQL of a row's shard over its bare columns, as the
// generated columns of the outbox table compute it: CRC32 of the key, and for a
// keyless row CRC32 of its payload plus the microseconds of created_at.
// MariaDB refuses AUTO_INCREMENT columns (id) and case-insensitive ones
// (event_id) in an indexed generated column, hence the keyless form: it
// only has to spread rows, not order them.
const shardSQL = "(CASE WHEN event_key = '' THEN CRC32(payload) + MICROSECOND(created_at) ELSE CRC32(event_key) END) % 64"

// unparkLimit bounds the rows one statement unparks; sweepKeys the keys
// with parked rows one Balance looks at.
const (
	unparkLimit = 1000
	sweepKeys   = 100
)

// maxDeadlockRetries bounds how often Claim and Balance run again
// after InnoDB chose them as a deadlock's victim (it rolled them back).
const maxDeadlockRetries = 5

// afterCommit marks a claim error that came after the claim's transaction
// committed (or while its commit's outcome was unknown): its rows may be
// claimed under the lease, so the claim must not run again under it.
type afterCommit struct{ err error }

func (e *afterCommit) Error() string { return e.err.Error() }
func (e *afterCommit) Unwrap() error { return e.err }

// relayRetention is how long, at least, a relay's row in <table>_relays
// stays after its membership ended (it left, or its lease ran out), so
// that the row outlasts the claims made under it. A claim's lease ends at
// most about one LeaseFor after the membership's (both are renewed by the
// same relay), so each row records its relay's LeaseFor (lease_for) and a
// heartbeat deletes a row only once it ended more than the longer of this
// and twice that lease ago, whatever the lease of the relay that
// heartbeats. A row without lease_for (the column is nullable; a row
// written by hand may lack it) is judged by the heartbeating relay's own
// LeaseFor instead.
const relayRetention = 10 * time.Minute

// expireRelaysSQL deletes the rows of <table>_relays whose membership
// ended longer ago than their retention (see relayRetention); arguments:
// the database clock now, relayRetention and the heartbeat's LeaseFor, in
// microseconds. The table has a row per relay (live, or ended within the
// retention) and no index but its primary key, so the DELETE reads those
// few rows, as it did when it compared lease_until with one bound.
func expireRelaysSQL(relays string) string {
	return "DELETE FROM " + relays + " WHERE lease_until <= ? - GREATEST(?, 2 * COALESCE(lease_for, ?))"
}

// sweepTimeout bounds Balance's orphan sweep.
const sweepTimeout = 500 * time.Millisecond

// deadlock reports whether err is InnoDB's deadlock error (1213), after
// which the transaction was rolled back.
func deadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1213
}

// maxParkingRounds bounds the claims one Claim runs while each only
// parks rows.
const maxParkingRounds = 8

var _ driver.Driver = (*Store)(nil)

// Names of the ownership indexes (schema.go), after the table's short name.
func (s *Store) laneIdx() string   { return s.opts.Table + "_lane_idx" }
func (s *Store) busyIdx() string   { return s.opts.Table + "_busy_idx" }
func (s *Store) parkedIdx() string { return s.opts.Table + "_parked_idx" }

func (s *Store) shardsTable() string { return strings.TrimSuffix(s.table, "`") + "_shards`" }
func (s *Store) relaysTable() string { return strings.TrimSuffix(s.table, "`") + "_relays`" }

// ShardOf returns the shard of a row with this key (for a keyed row; id is
// unused: a keyless row's shard depends on its payload and creation time),
// as the database computes it.
func (s *Store) ShardOf(ctx context.Context, key string, _ int64) (int, error) {
	var shard int
	err := s.db.QueryRowContext(ctx, "SELECT CRC32(CONVERT(? USING utf8mb4)) % 64", key).Scan(&shard)
	return shard, wrap("shard", err)
}

// heldSQL is the condition that the keyed row o is held by an earlier row
// of its key: NEW and waiting for a retry or a delayed AvailableAt, DEAD
// (when the parameter is true), or parked. Each probe depends on the key
// alone (MIN(id) < o.id), so MariaDB answers a key's later rows from its
// subquery cache, and reads only the key's holding rows through the hold
// and parked indexes.
func (s *Store) heldSQL() string {
	hold := "FROM " + s.table + " h" + s.forceHoldIdx() + " WHERE h.hold_key = o.event_key AND "
	return `(o.event_key <> '' AND (
	IFNULL((SELECT MIN(h.id) ` + hold + `h.status = 'NEW' AND h.next_attempt_at > NOW(6)), o.id) < o.id
	OR (? AND IFNULL((SELECT MIN(h.id) ` + hold + `h.status = 'DEAD'), o.id) < o.id)
	OR IFNULL((SELECT MIN(p.id) FROM ` + s.table + ` p FORCE INDEX (` + s.parkedIdx() + `) WHERE p.parked_key = o.event_key), o.id) < o.id))`
}

// dueSQL: a NEW row is due when its next attempt has come, and always when
// it was never delayed (next_attempt_at at most created_at). The second
// half closes a window: NOW(6) is the statement's start, and the rows it
// reads are those committed when InnoDB opens its read view, a little
// later (or much later, when the statement waits for a metadata lock or
// the machine is loaded). A key's earlier row committed in between has a
// created_at after the statement's NOW(6), and a key's later row (its
// INSERT started earlier) one before it: judged by the clock alone the
// earlier row would be "not due" and the later one claimed without it. A
// row that is delayed (next_attempt_at after created_at) is exactly one
// that heldSQL counts as holding its key while not due, so the two rules
// agree.
func dueSQL(p string) string {
	return "(" + p + "next_attempt_at <= NOW(6) OR " + p + "next_attempt_at <= " + p + "created_at)"
}

// Claim takes up to req.Limit ready events from the shards of
// req.Shards that req.Lease.Owner still holds under their epochs and that
// no live claim of another owner touches, in id order within each shard.
// ErrLeaseLost when it holds none of them any more.
//
// A claim whose candidates were all held parks them and claims nothing;
// it then runs again at once (up to maxParkingRounds times); a round that
// buried rows returns at once, so that its burials reach the relay.
func (s *Store) Claim(ctx context.Context, req driver.ClaimParams) (driver.Claim, error) {
	for round, deadlocks := 1, 0; ; round++ {
		c, parked, err := s.claimOwned(ctx, req, nil)
		var done *afterCommit
		if deadlock(err) && !errors.As(err, &done) && deadlocks < maxDeadlockRetries && ctx.Err() == nil {
			// InnoDB rolled the claim back (a Balance taking a shard
			// locked the rows in another order): run it again.
			deadlocks++
			round--
			continue
		}
		if err != nil || len(c.Events) > 0 || len(c.Buried) > 0 || parked == 0 || round == maxParkingRounds {
			return c, err
		}
	}
}

// ClaimOwnedReads is one round of Claim that walks the lanes (never the
// range read of a relay that keeps up) and also returns how many index and
// table rows its statements read, by the session's Handler_read counters.
// For tests and diagnosis: a walk should read about as many rows as it
// claims and parks, whatever the backlog behind it.
func (s *Store) ClaimOwnedReads(ctx context.Context, req driver.ClaimParams) (driver.Claim, int64, error) {
	var reads int64
	c, _, err := s.claimOwned(ctx, req, &reads)
	return c, reads, err
}

// candidate is a row a claim considers.
type candidate struct {
	id      int64
	key     string
	sending bool // an expired in-flight row, to take over
	shard   int  // sending: its shard
	held    bool
}

// claimOwned runs one claim in one READ COMMITTED transaction:
//
//  1. lock the owner's shard rows (FOR UPDATE, in shard order): a takeover
//     in Balance skips them, and two claims of one owner over the same
//     shards run one after the other; then read (without a lock) the
//     owner's row in <table>_relays, whose lease_until is every one of its
//     shard leases: Balance renews that row and never a shard row, so a
//     heartbeat never waits for its own relay's claims;
//  2. read (plainly) the in-flight rows of the shards held under the given
//     epochs: a shard with a live one of another owner is skipped (the
//     previous holder's work is not settled); in the others, the expired
//     ones are read again, locked, and taken over (one above the part of
//     its lane step 3 read waits: a NEW row of its key may come first);
//  3. read the pending rows: while the relay keeps up, one range read of
//     the lanes, up to four batches, sorted by id; otherwise, or when that
//     read reached its cap, walk the lane index, a page of each shard's
//     range in id order, until about Limit rows are read; heldSQL for each
//     row read;
//  4. park the held rows, take the others up to MaxBytes of payload
//     (cutToBytes) with an UPDATE that checks each row is still
//     claimable, read the events taken, commit.
//
// It returns the claim and how many rows it parked; reads, when not nil,
// gets the rows its statements read.
func (s *Store) claimOwned(ctx context.Context, req driver.ClaimParams, reads *int64) (driver.Claim, int, error) {
	req = req.WithDefaults()
	c := driver.Claim{Lease: req.Lease}
	if len(req.Shards) == 0 {
		return c, 0, nil
	}
	leases := slices.Clone(req.Shards)
	slices.SortFunc(leases, func(a, b driver.ShardLease) int { return cmp.Compare(a.Shard, b.Shard) })
	leases = slices.CompactFunc(leases, func(a, b driver.ShardLease) bool { return a.Shard == b.Shard })
	epochs := map[int]int64{}
	shardArgs := make([]any, 0, len(leases))
	for _, l := range leases {
		if l.Shard < 0 || l.Shard >= numShards {
			return c, 0, fmt.Errorf("mysqlstore: claim: shard %d does not exist: a table has shards 0 to %d", l.Shard, numShards-1)
		}
		epochs[l.Shard] = l.Epoch
		shardArgs = append(shardArgs, l.Shard)
	}
	nothing := func(err error) (driver.Claim, int, error) {
		return driver.Claim{Lease: req.Lease}, 0, fmt.Errorf("mysqlstore: claim: %w (%w)", err, driver.ErrNothingClaimed)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nothing(err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nothing(wrap("begin", err))
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()

	// 1. The owner's shard rows, locked; those still held under the
	// epochs asked for, while the owner's membership lease is live. The
	// lease is read after the lock, in a statement of its own: a locking
	// read would lock the relay row too, and the heartbeat would wait.
	// By the primary key: through the owner index InnoDB would lock every
	// shard row of the owner, those it is releasing too, and a heartbeat's
	// release (SKIP LOCKED) skipped them while claims followed each other
	// (a revoked shard then stayed held, its events waiting, for seconds).
	rows, err := tx.QueryContext(ctx, "SELECT shard, epoch FROM "+s.shardsTable()+byID+" WHERE shard IN ("+marks(len(shardArgs))+") AND owner = ? ORDER BY shard FOR UPDATE",
		append(slices.Clone(shardArgs), req.Lease.Owner)...)
	if err != nil {
		return nothing(wrap("lock shards", err))
	}
	var held []int
	for rows.Next() {
		var sh int
		var ep int64
		if err := rows.Scan(&sh, &ep); err != nil {
			rows.Close()
			return nothing(err)
		}
		if ep == epochs[sh] {
			held = append(held, sh)
		}
	}
	if err := rows.Err(); err != nil {
		return nothing(err)
	}
	var live bool
	if err := tx.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM "+s.relaysTable()+" WHERE owner = ? AND lease_until > "+dbNow+")", req.Lease.Owner).Scan(&live); err != nil {
		return nothing(wrap("relay lease", err))
	}
	if !live {
		held = nil
	}
	if len(held) == 0 {
		return driver.Claim{}, 0, fmt.Errorf("mysqlstore: claim: owner %q holds none of the %d shards asked for (%s) under their epochs any more: %w", req.Lease.Owner, len(leases), fmtShards(leases), driver.ErrLeaseLost)
	}

	var before int64
	if reads != nil {
		if before, err = handlerReads(ctx, tx); err != nil {
			return nothing(err)
		}
	}

	// 2. The in-flight rows of those shards: another owner's live ones
	// and the expired ones, by a plain read of the busy index; then the
	// expired ones, locked, in the shards that have any. The locking
	// read waits for a fenced write in progress on them (a Retry or
	// Release of their old owner that checked the lease just before it
	// ran out) and then sees what it did; a fenced write that comes later
	// waits for this claim and finds the rows no longer its own. So no
	// grace period is needed here, unlike Claim's. The plain read sees
	// such a row as it was before that write (SENDING, its lease run
	// out), so a shard with one is always read again, locked. A shard
	// with none is not: a locking read waits for the locks on the index
	// records it reaches, and the relay's own acks hold those of its
	// in-flight rows beside the expired range (at a steady 1,000
	// plain-SQL events/s that read took 57 ms at its median, found no
	// row, and deadlocked with those acks; see BENCHMARKS.md).
	busy, expired := map[int]bool{}, map[int]bool{}
	rows, err = tx.QueryContext(ctx, "(SELECT DISTINCT o.busy, 0 FROM "+s.table+" o FORCE INDEX ("+s.busyIdx()+") WHERE "+inRanges("o.busy", held)+" AND o.lease_until > NOW(6) AND o.lease_owner <> ?)"+
		" UNION ALL (SELECT DISTINCT o.busy, 1 FROM "+s.table+" o FORCE INDEX ("+s.busyIdx()+") WHERE "+inRanges("o.busy", held)+" AND "+leaseExpired("o.")+")",
		append(append(rangeArgs(held), req.Lease.Owner), rangeArgs(held)...)...)
	if err != nil {
		return nothing(wrap("in-flight rows", err))
	}
	for rows.Next() {
		var sh int
		var ended bool
		if err := rows.Scan(&sh, &ended); err != nil {
			rows.Close()
			return nothing(err)
		}
		if ended {
			expired[sh] = true
		} else {
			busy[sh] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nothing(err)
	}
	var ok, takeOver []int
	for _, sh := range held {
		if !busy[sh] {
			ok = append(ok, sh)
			if expired[sh] {
				takeOver = append(takeOver, sh)
			}
		}
	}
	if len(ok) == 0 {
		committed = true
		return c, 0, wrap("claim", tx.Commit())
	}
	var cands []candidate
	// waitFrom: a key's lowest row this claim leaves (expired, past
	// Limit): the key's rows after it wait for a later claim.
	waitFrom := map[string]int64{}
	leave := func(cd candidate) {
		if w, ok := waitFrom[cd.key]; cd.key != "" && (!ok || cd.id < w) {
			waitFrom[cd.key] = cd.id
		}
	}
	waits := func(cd candidate) bool {
		w, ok := waitFrom[cd.key]
		return cd.key != "" && ok && cd.id > w
	}
	if len(takeOver) > 0 {
		// The in-flight rows of other owners and the expired ones of
		// those shards, locked, lowest ids first, each judged by
		// heldSQL. A row of another owner that is live now had its lease
		// renewed by an Extend that checked it just before it ran out
		// and committed after the plain read: its shard is busy after
		// all, and this claim leaves it (it would otherwise take the
		// key's later rows while that one is in flight). Of the others,
		// those past Limit make their keys' later rows wait (as does one
		// above the part of its lane step 3 reads, in step 4), and only
		// those: a key's earlier rows are taken (had they waited too, a
		// dead relay's claims over Limit would be taken over by no claim
		// ever). One range per shard (IN, not BETWEEN): a range over
		// several shards would read, and lock, every in-flight row of
		// them on its way. (This read waits for the relay's own acks in
		// those shards: only after a relay's leases ran out.)
		rows, err = tx.QueryContext(ctx, "SELECT o.id, o.event_key, o.busy, "+leaseExpired("o.")+", "+s.heldSQL()+" FROM "+s.table+" o FORCE INDEX ("+s.busyIdx()+") WHERE o.busy IN ("+marks(len(takeOver))+") AND ("+leaseExpired("o.")+" OR o.lease_owner <> ?) ORDER BY o.id FOR UPDATE",
			append(append([]any{req.HoldDeadKeys}, intArgs(takeOver)...), req.Lease.Owner)...)
		if err != nil {
			return nothing(wrap("expired rows", err))
		}
		type expiredRow struct {
			cd    candidate
			shard int
		}
		var read []expiredRow
		for rows.Next() {
			r := expiredRow{cd: candidate{sending: true}}
			var ended bool
			if err := rows.Scan(&r.cd.id, &r.cd.key, &r.shard, &ended, &r.cd.held); err != nil {
				rows.Close()
				return nothing(err)
			}
			r.cd.shard = r.shard
			if !ended {
				busy[r.shard] = true
				continue
			}
			read = append(read, r)
		}
		if err := rows.Err(); err != nil {
			return nothing(err)
		}
		ok = slices.DeleteFunc(ok, func(sh int) bool { return busy[sh] })
		if len(ok) == 0 {
			committed = true
			return c, 0, wrap("claim", tx.Commit())
		}
		for _, r := range read {
			switch {
			case busy[r.shard]:
			case len(cands) < req.Limit:
				cands = append(cands, r.cd)
			default:
				leave(r.cd)
			}
		}
	}

	// 3. The walk: a page of each shard's lane in id order (one UNION
	// ALL), then more of the lanes that filled their page while the
	// claim is short. Each lane's rows read are a prefix of it, so the
	// lowest Limit ids of them all keep every key's order. It reads a
	// batch's worth whatever the expired rows above took: a key's first
	// event released by a relay that then died before it settled the
	// key's later ones is NEW below their expired claims, and comes
	// first; an expired row above the part of its lane read waits (unread
	// lanes: below).
	need := req.Limit
	unread := map[int]int64{} // lane → the last id read, where more may follow
	// A relay that keeps up claims often and finds little, and the walk's
	// one branch per lane costs MariaDB its planning and start-up whether
	// the lane holds rows or not (at a steady 1,000 plain-SQL events/s,
	// 56 ms a claim for about 90 rows: most of the claim). So while its
	// last claim took and parked less than half its batch, a claim first
	// reads its lanes by runs of consecutive shards, each one range of the
	// lane index, up to four batches' rows. A read that stopped short of that
	// cap holds every due row of those lanes, which is all a walk could
	// return; one that reached it (a backlog) is dropped, and the walk
	// runs. After a claim that took or parked at least half its batch,
	// the next one walks at once.
	_, walk := s.busyOwners.Load(req.Lease.Owner)
	if need > 0 && !walk && reads == nil {
		limit := 4 * need
		rows, err := tx.QueryContext(ctx, "SELECT o.id, o.event_key, "+s.heldSQL()+" FROM "+s.table+" o FORCE INDEX ("+s.laneIdx()+") WHERE "+inRanges("o.lane", ok)+" AND "+dueSQL("o.")+" LIMIT ?",
			append(append([]any{req.HoldDeadKeys}, rangeArgs(ok)...), limit)...)
		if err != nil {
			return nothing(wrap("claim", err))
		}
		var all []candidate
		for rows.Next() {
			var cd candidate
			if err := rows.Scan(&cd.id, &cd.key, &cd.held); err != nil {
				rows.Close()
				return nothing(err)
			}
			all = append(all, cd)
		}
		if err := rows.Err(); err != nil {
			return nothing(err)
		}
		if len(all) < limit {
			cands = append(cands, all...)
			need = 0
		}
	}
	after := map[int]int64{}
	active := ok
	page := need/len(ok) + 4
	for round := 0; need > 0 && len(active) > 0 && round < 4; round++ {
		var b strings.Builder
		var args []any
		for i, lane := range active {
			if i > 0 {
				b.WriteString(" UNION ALL ")
			}
			b.WriteString("(SELECT o.id, o.event_key, o.lane, " + s.heldSQL() + " FROM " + s.table + " o FORCE INDEX (" + s.laneIdx() + ") WHERE o.lane = ? AND o.id > ? AND " + dueSQL("o.") + " ORDER BY o.id LIMIT ?)")
			from, ok := after[lane]
			if !ok {
				from = math.MinInt64 // a plain-SQL producer may give an id below 1
			}
			args = append(args, req.HoldDeadKeys, lane, from, page)
		}
		rows, err := tx.QueryContext(ctx, b.String(), args...)
		if err != nil {
			return nothing(wrap("claim", err))
		}
		got := map[int]int{}
		for rows.Next() {
			var cd candidate
			var lane int
			if err := rows.Scan(&cd.id, &cd.key, &lane, &cd.held); err != nil {
				rows.Close()
				return nothing(err)
			}
			cands = append(cands, cd)
			got[lane]++
			if a, ok := after[lane]; !ok || cd.id > a {
				after[lane] = cd.id
			}
			need--
		}
		if err := rows.Err(); err != nil {
			return nothing(err)
		}
		var full []int
		clear(unread)
		for _, lane := range active {
			if got[lane] == page {
				full = append(full, lane)
				unread[lane] = after[lane]
			}
		}
		active = full
		if len(active) > 0 {
			page = max(need, 0)/len(active) + 4
		}
	}

	// 4. Decide in id order: once a row of a key is parked, its later
	// rows in this claim are parked too; once one is left (past Limit),
	// its later rows wait.
	slices.SortFunc(cands, func(a, b candidate) int { return cmp.Compare(a.id, b.id) })
	blocked := map[string]bool{}
	var take, park, parkSending []int64
	for _, cd := range cands {
		if last, ok := unread[cd.shard]; ok && cd.sending && cd.key != "" && cd.id > last {
			// its lane has rows the walk did not read, and one of its
			// key may come before it: it waits for a later claim
			leave(cd)
			continue
		}
		switch {
		case waits(cd):
			// an earlier row of its key is left: in flight under an
			// expired lease this claim does not take over, or past
			// Limit; wait for it
		case cd.key != "" && (cd.held || blocked[cd.key]):
			blocked[cd.key] = true
			if cd.sending {
				parkSending = append(parkSending, cd.id)
			} else {
				park = append(park, cd.id)
			}
		case len(take) < req.Limit:
			take = append(take, cd.id)
		default:
			leave(cd)
		}
	}
	if len(take)+len(park)+len(parkSending) >= max(req.Limit/2, 1) {
		s.busyOwners.Store(req.Lease.Owner, struct{}{})
	} else {
		s.busyOwners.Delete(req.Lease.Owner)
	}
	if take, err = s.cutToBytes(ctx, tx, take, req.MaxBytes); err != nil {
		return nothing(err)
	}
	parked := 0
	if len(park) > 0 {
		res, err := tx.ExecContext(ctx, "UPDATE "+s.table+byID+" SET parked = 1 WHERE id IN ("+marks(len(park))+") AND status = 'NEW' AND parked = 0", appendIDs(nil, park)...)
		if err != nil {
			return nothing(wrap("park", err))
		}
		n, _ := res.RowsAffected()
		parked += int(n)
	}
	if len(parkSending) > 0 {
		res, err := tx.ExecContext(ctx, "UPDATE "+s.table+byID+" SET status = 'NEW', lease_owner = '', lease_until = NULL, parked = 1 WHERE id IN ("+marks(len(parkSending))+") AND status = 'SENDING' AND "+leaseExpired(""), appendIDs(nil, parkSending)...)
		if err != nil {
			return nothing(wrap("park", err))
		}
		n, _ := res.RowsAffected()
		parked += int(n)
	}
	var bad map[int64]error
	if len(take) > 0 {
		args := appendIDs([]any{req.Lease.Owner, req.Lease.Epoch, req.LeaseFor.Microseconds()}, take)
		if _, err := tx.ExecContext(ctx, "UPDATE "+s.table+byID+" SET status = 'SENDING', lease_owner = ?, lease_epoch = ?, lease_until = NOW(6) + INTERVAL ? MICROSECOND WHERE id IN ("+marks(len(take))+") AND ((status = 'NEW' AND parked = 0) OR (status = 'SENDING' AND "+leaseExpired("")+"))", args...); err != nil {
			return nothing(wrap("claim", err))
		}
		rows, err := tx.QueryContext(ctx, "SELECT "+cols(eventCols, "")+", UNIX_TIMESTAMP(lease_until) FROM "+s.table+byID+" WHERE id IN ("+marks(len(take))+") AND status = 'SENDING' AND lease_owner = ? AND lease_epoch = ? ORDER BY id",
			append(appendIDs(nil, take), req.Lease.Owner, req.Lease.Epoch)...)
		if err != nil {
			return nothing(wrap("claim", err))
		}
		for rows.Next() {
			var e outbox.Event
			var until sql.NullString
			broken, err := scanEvent(rows, &e, &until)
			if err != nil {
				rows.Close()
				return nothing(err)
			}
			if broken != nil {
				if bad == nil {
					bad = map[int64]error{}
				}
				bad[e.ID] = broken
			}
			if t, err := epoch(until); err == nil && (c.Until.IsZero() || t.Before(c.Until)) {
				c.Until = t
			}
			c.Events = append(c.Events, e)
		}
		if err := rows.Err(); err != nil {
			return nothing(err)
		}
	}
	if reads != nil {
		after, err := handlerReads(ctx, tx)
		if err != nil {
			return nothing(err)
		}
		*reads = after - before
	}
	if s.claimHook != nil {
		s.claimHook()
	}
	committed = true
	if err := tx.Commit(); err != nil {
		// The commit's outcome is unknown: no ErrNothingClaimed, and no
		// second run under the same lease.
		return driver.Claim{Lease: req.Lease}, 0, &afterCommit{wrap("claim: commit", err)}
	}
	if parked > 0 && len(c.Events) == 0 {
		return c, parked, nil
	}
	if len(c.Events) == 0 {
		return c, parked, nil
	}
	if err = driver.ScreenClaim(ctx, &c, bad, req.HoldDeadKeys, s.Bury, s.Release); err != nil {
		// The claim is committed: running it again under the same lease
		// would leave these rows claimed and unseen (a deadlock here must
		// not be retried by Claim).
		return driver.Claim{Lease: req.Lease}, parked, &afterCommit{fmt.Errorf("mysqlstore: claim: %w", err)}
	}
	return c, parked, nil
}

// runs splits sorted, distinct shards into runs of consecutive ones.
func runs(shards []int) [][2]int {
	var out [][2]int
	for _, sh := range shards {
		if n := len(out); n > 0 && out[n-1][1] == sh-1 {
			out[n-1][1] = sh
		} else {
			out = append(out, [2]int{sh, sh})
		}
	}
	return out
}

// inRanges is the condition that col is one of shards (sorted, distinct),
// as one BETWEEN per run of consecutive shards: one index range each
// rather than one per shard. rangeArgs are its arguments.
func inRanges(col string, shards []int) string {
	parts := make([]string, len(runs(shards)))
	for i := range parts {
		parts[i] = col + " BETWEEN ? AND ?"
	}
	return "(" + strings.Join(parts, " OR ") + ")"
}

func rangeArgs(shards []int) []any {
	var out []any
	for _, r := range runs(shards) {
		out = append(out, r[0], r[1])
	}
	return out
}

func intArgs(v []int) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = x
	}
	return out
}

// handlerReads sums the session's Handler_read_* counters: index lookups
// and the rows scans returned.
func handlerReads(ctx context.Context, tx *sql.Tx) (int64, error) {
	rows, err := tx.QueryContext(ctx, "SHOW SESSION STATUS LIKE 'Handler_read%'")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var sum int64
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			return 0, err
		}
		switch name {
		case "Handler_read_first", "Handler_read_key", "Handler_read_last", "Handler_read_next", "Handler_read_prev", "Handler_read_rnd", "Handler_read_rnd_next":
			sum += v
		}
	}
	return sum, rows.Err()
}

// fmtShards lists shard leases as shard@epoch, for error messages.
func fmtShards(ls []driver.ShardLease) string {
	parts := make([]string, 0, min(len(ls), 8))
	for i, l := range ls {
		if i == 8 {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, strconv.Itoa(l.Shard)+"@"+strconv.FormatInt(l.Epoch, 10))
	}
	return strings.Join(parts, " ")
}

// Balance heartbeats req.Owner, gives up req.Release (or everything, with
// Leave), renews what it holds, takes free or expired shards up to its
// fair share (FOR UPDATE SKIP LOCKED: a shard a claim is working in is
// left for the next round) and marks the shards over it Revoke when
// another relay is short and no free shard is left for it. One READ
// COMMITTED transaction; lease times are the database clock read once at
// its start. Then, outside it, a bounded sweep unparks rows whose key
// holds nothing any more.
//
// It waits for no lock a claim holds. A claim locks its owner's shard rows
// FOR UPDATE (InnoDB has no lock mode that a renewal could take beside
// it), so the lease
// lives elsewhere: a shard is held while its row names the owner and the
// owner's row in <table>_relays is live, and the renewal is one UPDATE of
// that row, which claims only read. Releasing and taking shards lock
// shard rows with SKIP LOCKED: a shard a claim is working in is released
// or taken by a later heartbeat. A heartbeat that waited behind its own
// relay's claims let the leases run out under load and left the relay
// holding nothing (pgstore's torture showed it).
func (s *Store) Balance(ctx context.Context, req driver.BalanceParams) (driver.Ownership, error) {
	req = req.WithDefaults()
	own := driver.Ownership{Shards: numShards}
	if err := req.Validate(numShards); err != nil {
		return own, fmt.Errorf("mysqlstore: balance: %w", err)
	}
	for tries := 1; ; tries++ {
		own = driver.Ownership{Shards: numShards}
		err := s.balance(ctx, req, &own)
		if err == nil {
			break
		}
		if !deadlock(err) || tries == maxDeadlockRetries || ctx.Err() != nil {
			return driver.Ownership{Shards: numShards}, wrap("balance", err)
		}
	}
	// The heartbeat stands whatever the orphan sweep does: it runs under a
	// short deadline of its own (its UPDATEs may wait on locked rows), and
	// one that fails is tried again by the next heartbeat.
	sctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	_ = s.sweep(sctx, req.HoldDeadKeys)
	cancel()
	return own, nil
}

// lockUnclaimed locks the shard rows that where selects (a condition with
// args) and that no claim is working in (FOR UPDATE SKIP LOCKED), in shard
// order, and returns them.
func lockUnclaimed(ctx context.Context, tx *sql.Tx, shards, where, tail string, args ...any) ([]int, error) {
	rows, err := tx.QueryContext(ctx, "SELECT shard FROM "+shards+" WHERE "+where+tail+" FOR UPDATE SKIP LOCKED", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var sh int
		if err := rows.Scan(&sh); err != nil {
			return nil, err
		}
		out = append(out, sh)
	}
	return out, rows.Err()
}

// freeShards gives up the shards of owner among locked (rows this transaction
// locked).
func freeShards(ctx context.Context, tx *sql.Tx, shards, owner string, locked []int) error {
	if len(locked) == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, "UPDATE "+shards+byID+" SET owner = '', lease_until = 0 WHERE owner = ? AND shard IN ("+marks(len(locked))+")", append([]any{owner}, intArgs(locked)...)...)
	return err
}

func (s *Store) balance(ctx context.Context, req driver.BalanceParams, own *driver.Ownership) error {
	shards, relays := s.shardsTable(), s.relaysTable()
	var conn *int64
	if !req.Leave {
		conn = s.session(ctx, req.Owner)
	}
	lease := req.LeaseFor.Microseconds()
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var now int64
	if err := tx.QueryRowContext(ctx, "SELECT "+dbNow).Scan(&now); err != nil {
		return err
	}
	if req.Leave {
		// The shards no claim works in are free at once; the others as
		// soon as the membership is gone, for a taker that waits for the
		// claim (the relay settled its work before leaving: there is none).
		mine, err := lockUnclaimed(ctx, tx, shards, "owner = ?", " ORDER BY shard", req.Owner)
		if err != nil {
			return err
		}
		if err := freeShards(ctx, tx, shards, req.Owner, mine); err != nil {
			return err
		}
		// The membership ends now; its row stays a while (see
		// relayRetention).
		if _, err := tx.ExecContext(ctx, "UPDATE "+relays+" SET lease_until = LEAST(lease_until, ?) WHERE owner = ?", now, req.Owner); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+relays+" WHERE lease_until > ?", now).Scan(&own.Relays); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		s.endSession(req.Owner)
		return nil
	}
	// Renew: the owner's membership row is the lease of every shard whose
	// row names it. A shard whose lease ran out but that nobody took is
	// still this owner's (same epoch: nobody held it in between).
	until := now + lease
	own.Until = time.UnixMicro(until)
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+relays+" (owner, lease_until, lease_for, conn) VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE lease_until = VALUES(lease_until), lease_for = VALUES(lease_for), conn = VALUES(conn)", req.Owner, until, lease, conn); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, expireRelaysSQL(relays), now, relayRetention.Microseconds(), lease); err != nil {
		return err
	}
	// Relays whose session is gone (session.go) lose their membership
	// now, so the take below moves their shards on at once.
	if err := s.reap(ctx, tx, req.Owner, now); err != nil {
		return err
	}
	if len(req.Release) > 0 {
		rel, err := lockUnclaimed(ctx, tx, shards+byID, "owner = ? AND shard IN ("+marks(len(req.Release))+")", " ORDER BY shard", append([]any{req.Owner}, intArgs(req.Release)...)...)
		if err != nil {
			return err
		}
		if err := freeShards(ctx, tx, shards, req.Owner, rel); err != nil {
			return err
		}
	}
	// The live relays in byte order: the first S mod n get one shard more.
	var names []string
	rows, err := tx.QueryContext(ctx, "SELECT owner FROM "+relays+" WHERE lease_until > ?", now)
	if err != nil {
		return err
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	slices.Sort(names)
	own.Relays = len(names)
	share := func(owner string) int {
		i, _ := slices.BinarySearch(names, owner)
		n := max(len(names), 1)
		if i < numShards%n {
			return numShards/n + 1
		}
		return numShards / n
	}
	// A shard is held when its row names a live relay (names holds this
	// owner: its row was written above); every other shard is free or
	// expired.
	liveArgs := make([]any, len(names))
	for i, n := range names {
		liveArgs[i] = n
	}
	inLive := "owner IN (" + marks(len(names)) + ")"
	holding := map[string]int{}
	rows, err = tx.QueryContext(ctx, "SELECT owner, COUNT(*) FROM "+shards+" WHERE "+inLive+" GROUP BY owner", liveArgs...)
	if err != nil {
		return err
	}
	taken := 0
	for rows.Next() {
		var o string
		var n int
		if err := rows.Scan(&o, &n); err != nil {
			rows.Close()
			return err
		}
		holding[o] = n
		taken += n
	}
	if err := rows.Err(); err != nil {
		return err
	}
	free := numShards - taken
	mine := holding[req.Owner]
	if want := share(req.Owner); mine < want && free > 0 {
		// Free shards (released, never held) before expired ones, whose
		// dead owner's claims may still hold events for a while. The
		// expired owners are those read as not live above: one whose
		// heartbeat commits meanwhile loses the shard (its claims check
		// owner and epoch under the shard row's lock, and the in-flight
		// rows it leaves keep this owner's claims out of the shard until
		// they are settled or their leases end).
		pick, err := lockUnclaimed(ctx, tx, shards, "NOT "+inLive, " ORDER BY owner <> '', shard LIMIT ?", append(slices.Clone(liveArgs), want-mine)...)
		if err != nil {
			return err
		}
		if len(pick) > 0 {
			res, err := tx.ExecContext(ctx, "UPDATE "+shards+" SET owner = ?, epoch = epoch + 1, lease_until = ? WHERE shard IN ("+marks(len(pick))+") AND NOT "+inLive,
				append(append([]any{req.Owner, until}, intArgs(pick)...), liveArgs...)...)
			if err != nil {
				return err
			}
			n, _ := res.RowsAffected()
			free -= int(n)
		}
	}
	rows, err = tx.QueryContext(ctx, "SELECT shard, epoch FROM "+shards+" WHERE owner = ? ORDER BY shard", req.Owner)
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
	if err := rows.Err(); err != nil {
		return err
	}
	// Revoke the shards over the fair share when other live relays are
	// short of theirs by more than the free shards can make up.
	if over := len(own.Held) - share(req.Owner); over > 0 {
		short := 0
		for _, n := range names {
			if n != req.Owner {
				short += max(0, share(n)-holding[n])
			}
		}
		for i := len(own.Held) - 1; i >= 0 && over > 0 && short > free; i-- {
			own.Held[i].Revoke = true
			over--
			short--
		}
	}
	return tx.Commit()
}

// sweep unparks orphans: it visits up to sweepKeys keys with parked rows
// (a loose scan of the parked index, from where this Store's last sweep
// stopped, wrapping around), and unparks the lowest parked rows of each
// key that no earlier row holds any more (waiting for a retry or a delayed
// AvailableAt, or DEAD when hold). Parking is a cache of the claim's hold
// rule; a requeue or purge that commits while a claim parks a row of its
// key can leave the row parked behind nothing, and this is what finds it.
func (s *Store) sweep(ctx context.Context, hold bool) error {
	s.mu.Lock()
	after := s.sweepAfter
	s.mu.Unlock()
	rows, err := s.db.QueryContext(ctx, "SELECT parked_key, MIN(id) FROM "+s.table+" FORCE INDEX ("+s.parkedIdx()+") WHERE parked_key > ? GROUP BY parked_key ORDER BY parked_key LIMIT ?", after, sweepKeys)
	if err != nil {
		return err
	}
	type head struct {
		key string
		id  int64
	}
	var heads []head
	for rows.Next() {
		var h head
		if err := rows.Scan(&h.key, &h.id); err != nil {
			rows.Close()
			return err
		}
		heads = append(heads, h)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	last := ""
	if len(heads) == sweepKeys {
		last = heads[len(heads)-1].key
	}
	s.mu.Lock()
	s.sweepAfter = last
	s.mu.Unlock()
	hq := "FROM " + s.table + " h" + s.forceHoldIdx() + " WHERE h.hold_key = ? AND h.id < ? AND "
	var orphans []string
	for _, h := range heads {
		var heldBy bool
		if err := s.db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 "+hq+"h.status = 'NEW' AND h.next_attempt_at > NOW(6)) OR (? AND EXISTS (SELECT 1 "+hq+"h.status = 'DEAD'))",
			h.key, h.id, hold, h.key, h.id).Scan(&heldBy); err != nil {
			return err
		}
		if !heldBy {
			orphans = append(orphans, h.key)
		}
	}
	return s.unparkKeys(ctx, orphans)
}

// unparkKeys unparks, for each key, its lowest unparkLimit parked rows:
// their blocking row moved on, and the next claim decides again.
func (s *Store) unparkKeys(ctx context.Context, keys []string) error {
	n := int64(0)
	for _, k := range keys {
		res, err := s.exec(ctx, "UPDATE "+s.table+" FORCE INDEX ("+s.parkedIdx()+") SET parked = 0 WHERE parked_key = ? ORDER BY id LIMIT ?", k, unparkLimit)
		if err != nil {
			return err
		}
		m, _ := res.RowsAffected()
		n += m
	}
	if n > 0 {
		s.signal()
	}
	return nil
}

// anyParked is the cheap guard before unparking: one probe of the parked
// index.
func (s *Store) anyParked(ctx context.Context) (bool, error) {
	var some bool
	err := s.db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM "+s.table+" FORCE INDEX ("+s.parkedIdx()+") WHERE parked_key IS NOT NULL)").Scan(&some)
	return some, err
}

// parkedKeys returns the keys that have parked rows among those of the
// rows that where selects (a condition on o, with args), when the table
// has parked rows at all; the caller unparks them once it moved those
// rows on.
func (s *Store) parkedKeys(ctx context.Context, hint, where string, args ...any) ([]string, error) {
	some, err := s.anyParked(ctx)
	if err != nil || !some {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, "SELECT DISTINCT o.event_key FROM "+s.table+" o"+hint+" WHERE "+where+" AND o.event_key <> '' AND EXISTS (SELECT 1 FROM "+s.table+" p FORCE INDEX ("+s.parkedIdx()+") WHERE p.parked_key = o.event_key)", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}
