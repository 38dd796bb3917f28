package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox/store/driver"
)

// How claims are recorded.
//
// A claim is one row of <table>_claims: (owner, epoch, lease_until, ids, n,
// shards), the batch's event ids as ranges (an int8multirange: a claim walks
// the primary key, so they are nearly always one range), their count, and
// the shards it read. The claimed outbox rows themselves are not written:
// their status column keeps NEW while they are in flight, and Get, Stats and
// `outbox status` report them as SENDING from the claim. Rewriting every
// claimed row (the first design) made the claim a non-HOT UPDATE of 1,000
// rows, each touching the primary key, the event_id index and the in-flight
// index: measured here with EXPLAIN ANALYZE, 12.7 ms for a 1,000-row claim
// against 2.5 ms for this one, and the claim was two thirds of the relay's
// database time. The row is written once by the producer and once by the ack
// (DELETE), as in a hand-written claim-and-delete.
//
// Every state change takes the claim row's lock (FOR UPDATE) and checks
// (owner, epoch), and a claim takes over an expired lease by deleting its
// row, which waits for that lock: a stale relay's write either commits
// before the takeover, and the new claimer sees it, or finds its claim gone
// and changes nothing (ErrLeaseLost).

// claimsTable is the quoted name of the claims table.
func (s *Store) claimsTable() string { return s.qualified(s.opts.Table + "_claims") }

// claimSettings are the claim transaction's own planner settings
// (set_config(…, true) is transaction-local). A queue table's statistics are
// nearly always stale, and with none or old ones PostgreSQL chose a
// sequential scan and sort of the whole table (claims grew with the
// backlog), or a JIT compilation slower than the claim. Walking the primary
// key in id order is always the right plan here, and with sequential scans
// and sorts off it is the plan PostgreSQL makes even from an empty table's
// statistics, generic or not. So the claim uses the generic plan, made once
// per connection: planning it anew took 0.6 ms, most of a small claim's
// cost, and a relay at 1,000 events/s claims a few hundred times a second.
// Bitmap scans off: the claim reads a few rows of the shards and claims
// tables by key, where a bitmap scan costs each execution more set-up
// than the index scan it replaces. synchronous_commit: see relaySettings.
const claimSettings = "SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true), set_config('jit', 'off', true), set_config('synchronous_commit', 'off', true)"

// relaySettings are transaction-local settings for the relay's own writes.
// synchronous_commit = off: these writes need no flush before the reply,
// because losing one in a database crash only re-delivers (a lost claim or
// ack brings the event back under its lease) and never loses or invents an
// event; the user's enqueue keeps full durability. force_custom_plan: the
// id arrays are then constants to the planner, which hashes `= ANY` over
// them instead of comparing every pair. statement_timeout: a state change
// holds its claim's lock, and a claimer taking over an expired lease waits
// for it; 2 s bounds that wait. enable_seqscan = off: settle reads by id
// the events it changes, and its unpark reads their keys' parked rows; a
// queue table's statistics could make such a read a scan of the whole
// table (see claimSettings and ackClaimSettings).
const relaySettings = "SELECT set_config('synchronous_commit', 'off', true), set_config('plan_cache_mode', 'force_custom_plan', true), set_config('jit', 'off', true), set_config('statement_timeout', '2000', true), set_config('enable_seqscan', 'off', true)"

// ackClaimSettings are relaySettings for AckClaim, which binds no array:
// its plan is the same for every claim, so it is planned once. Sequential
// scans are off for the reason of claimSettings: with a queue table's
// statistics PostgreSQL joined the claim's ranges to a scan of the whole
// table instead of walking the primary key range by range.
const ackClaimSettings = "SELECT set_config('synchronous_commit', 'off', true), set_config('jit', 'off', true), set_config('statement_timeout', '2000', true), set_config('enable_seqscan', 'off', true)"

// settle runs one state change of a claim in one round trip: it locks the
// claim row of lease (which must be live when live is set), runs change
// over the claimed ids among $1, takes $1 out of the claim and drops the
// claim once it is empty. change is one or more CTEs, the last named
// "changed", that read the ids to change from the CTE "mine" and return
// one row per event changed. Its arguments start at $4. With unpark, the keys of the events
// changed get their lowest parked rows unparked (see unparkCTE): their
// next claim decides again whether the key still holds them.
func (s *Store) settle(ctx context.Context, op string, lease driver.Lease, ids []int64, live, unpark bool, change string, args ...any) error {
	if len(ids) == 0 {
		return nil
	}
	claims := s.claimsTable()
	unparked := ""
	if unpark {
		unparked = ", " + s.unparkCTE("unparked", "SELECT o.event_key FROM "+s.table+" o WHERE o.id IN (SELECT id FROM mine)", "p.id = ANY($1::bigint[])")
	}
	alive := ""
	if live {
		alive = " AND lease_until > now()"
	}
	sql := `WITH c AS (
	SELECT ids FROM ` + claims + ` WHERE owner = $2 AND epoch = $3` + alive + ` FOR UPDATE
), mine AS (
	SELECT DISTINCT x AS id FROM unnest($1::bigint[]) x WHERE x <@ (SELECT ids FROM c)
), ` + change + unparked + `, remaining AS (
	SELECT (SELECT ids FROM c) - (SELECT COALESCE(range_agg(int8range(x, x, '[]')), '{}') FROM unnest($1::bigint[]) x) AS ids
), rest AS (
	UPDATE ` + claims + ` k SET ids = r.ids,
		n = (SELECT COALESCE(sum(upper(x) - lower(x)), 0) FROM unnest(r.ids) x)
	FROM remaining r
	WHERE k.owner = $2 AND k.epoch = $3 AND EXISTS (SELECT 1 FROM c)
	RETURNING 1
)
SELECT count(*) FROM changed`
	b := &pgx.Batch{}
	b.Queue(relaySettings)
	b.Queue(sql, append([]any{ids, lease.Owner, lease.Epoch}, args...)...)
	b.Queue("DELETE FROM "+claims+" WHERE owner = $1 AND epoch = $2 AND isempty(ids)", lease.Owner, lease.Epoch)
	br := s.pool.SendBatch(ctx, b)
	var changed int64
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&changed)
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return wrap(op, err)
	}
	if op == "ack" {
		s.deleted(changed)
	}
	if int(changed) < len(ids) {
		return fmt.Errorf("pgstore: %s: %d of %d events: %w", op, len(ids)-int(changed), len(ids), driver.ErrLeaseLost)
	}
	return nil
}

// Extend renews the lease of the claim until now+d. Every id must still be
// in the claim.
func (s *Store) Extend(ctx context.Context, p driver.ExtendParams) (time.Time, error) {
	lease, ids, d := p.Lease, p.IDs, p.For
	if len(ids) == 0 {
		return time.Time{}, nil
	}
	b := &pgx.Batch{}
	b.Queue(relaySettings)
	b.Queue("UPDATE "+s.claimsTable()+" SET lease_until = now() + $4 * interval '1 microsecond' WHERE owner = $2 AND epoch = $3 AND lease_until > now() "+
		"RETURNING lease_until, (SELECT count(DISTINCT x) FROM unnest($1::bigint[]) x WHERE x <@ ids)",
		ids, lease.Owner, lease.Epoch, d.Microseconds())
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return time.Time{}, wrap("extend", err)
	}
	var until time.Time
	var held int64
	err := br.QueryRow().Scan(&until, &held)
	if err == pgx.ErrNoRows {
		return time.Time{}, fmt.Errorf("pgstore: extend: %d events: %w", len(ids), driver.ErrLeaseLost)
	}
	if err != nil {
		return time.Time{}, wrap("extend", err)
	}
	if int(held) < len(ids) {
		return time.Time{}, fmt.Errorf("pgstore: extend: %d of %d events: %w", len(ids)-int(held), len(ids), driver.ErrLeaseLost)
	}
	return until, nil
}

// Ack deletes ids, or moves them to the archive as SENT with KeepSent. The
// lease need not be live (the broker has the events), but the claim must
// still be this relay's: after a takeover nothing is changed.
func (s *Store) Ack(ctx context.Context, p driver.AckParams) error {
	lease, ids := p.Lease, p.IDs
	return s.settle(ctx, "ack", lease, ids, false, true, s.ackChange("", "t.id IN (SELECT id FROM mine)", "$2", "$3"))
}

// ackChange is the CTE "changed" of an ack: it deletes the rows that match
// which (an SQL condition on t and the tables of using, a USING clause or
// empty), or with KeepSent moves them to the archive as SENT under the
// lease in the parameters owner and epoch. It returns their keys.
func (s *Store) ackChange(using, which, owner, epoch string) string {
	if !s.opts.KeepSent {
		return "changed AS (DELETE FROM " + s.table + " t" + using + " WHERE " + which + " RETURNING t.event_key)"
	}
	const cols = "id, event_id, topic, event_key, event_type, aggregate_type, schema_version, payload, content_type, headers, attempts, next_attempt_at, last_error, created_at"
	return "gone AS (DELETE FROM " + s.table + " t" + using + " WHERE " + which + " RETURNING t.*), " +
		"changed AS (INSERT INTO " + s.archive + " (" + cols + ", lease_owner, lease_epoch, lease_until, status, sent_at) SELECT " + cols + ", " + owner + ", " + epoch + ", NULL, 'SENT', now() FROM gone RETURNING event_key)"
}

// AckClaim acks every event of the claim lease (driver.Driver): one
// statement deletes the claim row, which takes its lock and so fences a
// takeover exactly like Ack, and the rows it lists (or moves them to the
// archive). Nothing is sent per event, and the claim row is not rewritten.
func (s *Store) AckClaim(ctx context.Context, p driver.AckClaimParams) error {
	lease, n := p.Lease, p.N
	b := &pgx.Batch{}
	b.Queue(ackClaimSettings)
	b.Queue(s.ackClaimSQL(), lease.Owner, lease.Epoch)
	br := s.pool.SendBatch(ctx, b)
	var changed, found int64
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&changed, &found)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return wrap("ack", err)
	}
	s.deleted(changed)
	if found == 0 {
		return fmt.Errorf("pgstore: ack: the claim of %d events: %w", n, driver.ErrLeaseLost)
	}
	if int(changed) < n {
		return fmt.Errorf("pgstore: ack: %d of %d events: %w", n-int(changed), n, driver.ErrLeaseLost)
	}
	return nil
}

// ackClaimSQL is AckClaim's statement: $1 owner, $2 epoch; it returns
// the rows deleted (or archived) and the claim rows deleted (0 or 1).
func (s *Store) ackClaimSQL() string {
	// Each range of the claim is one walk along the primary key.
	change := s.ackChange(" USING (SELECT unnest(ids) AS r FROM c) u", "t.id >= lower(u.r) AND t.id < upper(u.r) AND t.status = 'NEW'", "$1", "$2")
	// The acked keys' parked rows are unparked (not those of the claim,
	// which this statement deletes).
	unpark := s.unparkCTE("unparked", "SELECT event_key FROM changed", "p.id <@ (SELECT ids FROM c)")
	return "WITH c AS (DELETE FROM " + s.claimsTable() + " WHERE owner = $1 AND epoch = $2 RETURNING ids), " + change + ", " + unpark + " SELECT (SELECT count(*) FROM changed), (SELECT count(*) FROM c)"
}

// Retry gives events back for a later attempt. The lease must still be live.
func (s *Store) Retry(ctx context.Context, p driver.RetryParams) error {
	lease, retries := p.Lease, p.Retries
	ids := make([]int64, len(retries))
	delays := make([]int64, len(retries))
	errs := make([]string, len(retries))
	for i, r := range retries {
		ids[i], delays[i], errs[i] = r.ID, max(r.Delay, 0).Microseconds(), driver.CleanError(r.Error)
	}
	change := "changed AS (UPDATE " + s.table + " t SET attempts = LEAST(t.attempts, 2147483646) + 1, next_attempt_at = now() + u.delay_us * interval '1 microsecond', last_error = u.err " +
		"FROM unnest($1::bigint[], $4::bigint[], $5::text[]) AS u(id, delay_us, err) WHERE t.id = u.id AND t.id IN (SELECT id FROM mine) AND t.status = 'NEW' RETURNING 1)"
	return s.settle(ctx, "retry", lease, ids, true, false, change, delays, errs)
}

// Bury marks events DEAD with their reason. The lease must still be live.
func (s *Store) Bury(ctx context.Context, p driver.BuryParams) error {
	lease, burials := p.Lease, p.Burials
	ids := make([]int64, len(burials))
	errs := make([]string, len(burials))
	for i, b := range burials {
		ids[i], errs[i] = b.ID, driver.CleanError(b.Error)
	}
	change := "changed AS (UPDATE " + s.table + " t SET status = 'DEAD', attempts = LEAST(t.attempts, 2147483646) + 1, last_error = u.err " +
		"FROM unnest($1::bigint[], $4::text[]) AS u(id, err) WHERE t.id = u.id AND t.id IN (SELECT id FROM mine) AND t.status = 'NEW' RETURNING 1)"
	return s.settle(ctx, "bury", lease, ids, true, true, change, errs)
}

// Release gives events back untouched: they leave the claim and are free
// again. The lease must still be live.
func (s *Store) Release(ctx context.Context, p driver.ReleaseParams) error {
	lease, ids := p.Lease, p.IDs
	change := "changed AS (SELECT 1 FROM " + s.table + " t WHERE t.id IN (SELECT id FROM mine) AND t.status = 'NEW')"
	return s.settle(ctx, "release", lease, ids, true, true, change)
}
