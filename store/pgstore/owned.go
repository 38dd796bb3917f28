package pgstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/driver"
)

// Ordering by ownership (driver.Driver); the why is in doc.go.

// numShards is S, the number of shards of a table: a power of two, so a
// shard is a bit mask of the row's hash.
const numShards = 64

// shardExpr is the SQL of a row's shard, over the columns of alias (""
// for the bare columns, as in the index definition): a keyed row's is the
// hash of its key, a keyless row's its id. The claim's text must match the
// index expression exactly for PostgreSQL to use the index.
func shardExpr(alias string) string {
	p := ""
	if alias != "" {
		p = alias + "."
	}
	return fmt.Sprintf("(CASE WHEN %[1]sevent_key = '' THEN %[1]sid ELSE hashtext(%[1]sevent_key) END) & %[2]d", p, numShards-1)
}

// ShardOf returns the shard of a row with this key and id, as the database
// computes it (hashtext is PostgreSQL's own hash, so this asks it).
func (s *Store) ShardOf(ctx context.Context, key string, id int64) (int, error) {
	var shard int
	err := s.pool.QueryRow(ctx, "SELECT ((CASE WHEN $1::text = '' THEN $2::bigint ELSE hashtext($1::text) END) & "+strconv.Itoa(numShards-1)+")::int", key, id).Scan(&shard)
	return shard, wrap("shard", err)
}

// unparkLimit bounds the rows one statement unparks (per key, and in all).
const unparkLimit = 1000

// sweepKeys is how many keys with parked rows one Balance looks at.
const sweepKeys = 100

func (s *Store) shardsTable() string { return s.qualified(s.opts.Table + "_shards") }
func (s *Store) relaysTable() string { return s.qualified(s.opts.Table + "_relays") }

var _ driver.Driver = (*Store)(nil)

// unparkCTE is a CTE named name that unparks, lowest ids first, at most
// unparkLimit parked rows of the keys keys (an SQL query of one text
// column) has, except those among the ids not (an SQL condition on p.id,
// or ""): rows the same statement changes otherwise, which one statement
// must not modify twice. An uncorrelated EXISTS on the parked index comes
// first, so when the table has no parked row (the common case) it costs
// one probe. The rows are updated by id = ANY(ARRAY(…)), a primary key
// lookup per id whatever the statistics say: as a join, the generic plan
// AckClaim made after a VACUUM of a nearly empty table walked the whole
// primary key for parked rows, and once a backlog had built up each ack
// read all of it (46 ms an ack behind 100,000 rows; TestAckPlanAfterVacuum).
// The recheck is "parked IS NOT FALSE" (the column is NOT NULL): a plain
// "parked" would let the plan walk the whole parked index instead.
func (s *Store) unparkCTE(name, keys, not string) string {
	if not != "" {
		not = " AND NOT (" + not + ")"
	}
	lim := strconv.Itoa(unparkLimit)
	return name + ` AS (UPDATE ` + s.table + ` u SET parked = false WHERE u.id = ANY(ARRAY(
	SELECT p.id FROM (SELECT DISTINCT k FROM (` + keys + `) x(k) WHERE k <> '') g
	CROSS JOIN LATERAL (SELECT p.id FROM ` + s.table + ` p WHERE p.parked AND p.event_key = g.k` + not + ` ORDER BY p.id LIMIT ` + lim + `) p
	WHERE EXISTS (SELECT 1 FROM ` + s.table + ` e WHERE e.parked)
	LIMIT ` + lim + `)) AND u.parked IS NOT FALSE RETURNING 1)`
}

// holdSQL is the condition that a keyed row c (columns c.id, c.event_key)
// is held by an earlier row of its key: one waiting for a retry or a
// delayed AvailableAt, DEAD (when the parameter hold is true), or parked.
// Each probe of a small partial index is guarded by an uncorrelated EXISTS
// (computed once per statement), so a table without such rows pays
// nothing per row.
//
// Each probe bounds the index's leading columns by row comparisons, not by
// "event_key = c.event_key AND id < c.id": the primary key cannot serve a
// row comparison, so the plan is the index range whatever the statistics
// say. With the plain form, a table whose only rows at its last ANALYZE
// were one poison key's DEAD rows looked to the planner as if every key
// had them, and the (generic) plan walked the primary key below each
// candidate instead, every DEAD row for each: with 10,000 DEAD rows of one
// key, a claim of 1,000 events took 1.3 s (TestDeadRowsOfOneKeyDoNotSlowClaims).
func (s *Store) holdSQL(hold string) string {
	t := s.table
	return `c.event_key <> '' AND (
	(EXISTS (SELECT 1 FROM ` + t + ` e WHERE e.parked) AND EXISTS (SELECT 1 FROM ` + t + ` p WHERE p.parked AND p.event_key >= c.event_key AND (p.event_key, p.id) < (c.event_key, c.id)))
	OR (EXISTS (SELECT 1 FROM ` + t + ` d WHERE d.status = 'NEW' AND d.next_attempt_at > d.created_at AND d.next_attempt_at > now())
		AND EXISTS (SELECT 1 FROM ` + t + ` b WHERE b.next_attempt_at > b.created_at AND (b.status, b.event_key) >= ('NEW', c.event_key) AND (b.status, b.event_key, b.id) < ('NEW', c.event_key, c.id) AND b.next_attempt_at > now()))
	OR (` + hold + ` AND EXISTS (SELECT 1 FROM ` + t + ` d WHERE d.status = 'DEAD' AND d.status <> 'NEW')
		AND EXISTS (SELECT 1 FROM ` + t + ` b WHERE b.status <> 'NEW' AND (b.status, b.event_key) >= ('DEAD', c.event_key) AND (b.status, b.event_key, b.id) < ('DEAD', c.event_key, c.id))))`
}

// maxID is the largest bigint, an id no claim range can hold (its end
// would be one past it); maxIDReason is the reason such a row is buried
// with, a driver.BadRow text.
const maxID = "9223372036854775807"

var maxIDReason = driver.BadRow("id is " + maxID + ", the largest bigint, which the relay's id ranges cannot hold: insert the event again without an id, so the table's sequence gives it one").Error()

// buryMaxID is the SET clause that buries such a row.
var buryMaxID = "SET status = 'DEAD', parked = false, last_error = '" + strings.ReplaceAll(maxIDReason, "'", "''") + "'"

// ownedSQL caches the claim statements per table, number of branches and
// parkHeld.
var ownedSQL sync.Map // key: table + "#" + walk + "#" + runs + "#" + parkHeld → string

// ownedBranches is the number of shard branches of the claim statement for
// n shards: the next power of two (at most numShards). The statement names
// its shards by parameter, not in its text, so a table has at most seven
// claim statements of each shape (1, 2, 4, … 64 branches), each prepared
// and planned once per connection, whatever subsets of shards the relays claim from; the
// branches beyond the shards given read nothing.
func ownedBranches(n int) int {
	b := 1
	for b < n && b < numShards {
		b *= 2
	}
	return b
}

// ownedClaimSQL is the claim statement that walks up to walk shards, and
// with runs > 0 first reads up to runs runs of consecutive shards.
// Parameters: $1 owner, $2 claim epoch, $3 HoldDeadKeys, $4 limit, $5
// lease in µs, $6 the shards asked for (sorted, distinct), $7 their
// epochs by shard (element k+1 is shard k's; -1 for a shard not asked
// for), $8 the most payload bytes (MaxBytes, or the largest bigint);
// with runs, $9 and $10 the first and last shard of each run.
//
// held: the shards the owner still holds under those epochs (no takeover
// of them commits before this claim does: it holds the owner's claim
// lock, see claimOwned). It reads the shard rows from the first shard
// asked for to the last in one range of the primary key rather than one
// probe per shard asked for (BenchmarkClaimEmptyCPU, 7 alternated pairs:
// 0.965 of the probes' CPU, 0.92–1.01: no worse), and each row finds its
// epoch by its number: a shard not asked for has epoch -1 in $7, which no
// shard row has (epochs start at 0 and only grow). A join of the shards
// to the unnested arrays got, once the shards table had been vacuumed
// (autovacuum: every heartbeat rewrites it), a generic plan that
// rescanned the arrays for every shard row (64 × 64 rows; a claim of one
// event took 0.63 ms against 0.40–0.44 ms then). others: the
// shard lists of the other owners' live claims, read once (MATERIALIZED:
// inlined, the claims table would be scanned once per held shard, and
// between two vacuums it is tens of pages of dead claims; measured at a
// steady 1,000 events/s, that scan was most of a small claim's cost). ok:
// the held shards that none of them touches (an earlier claim with no
// shard list touches all): all of them when no such claim overlaps the
// held ones (the common case, one array overlap test per claim), else
// shard by shard.
//
// walked: a merge of one walk per shard of the shard index in id order (a
// Merge Append under the LIMIT: it reads only as far as the batch needs,
// whatever the backlog), skipping the owner's own claimed ids and rows not
// due; branch k walks shard $6[k] (NULL past the array's end: the index
// scan then reads nothing), and a branch whose shard is not ok is cut off
// by a one-time filter. A row never delayed (next_attempt_at at most
// created_at) is due whatever now() says: now() is the transaction's
// start, and the statement's snapshot comes later (after the lock waits
// above), so it can see a key's earlier row written by a transaction that
// began after it; "not due" must be exactly what holdSQL counts as a
// delayed earlier row, or a key's later row would be claimed without the
// earlier one.
//
// With runs (a relay that keeps up, see claimOwned), ranged reads first:
// run k is the shards $9[k] to $10[k] in one range scan of the shard index,
// ok shards only, stopped after 4 × $4 rows. A run that stopped short of
// its cap returned every pending row of its shards; when none reached it,
// those rows sorted by id are exactly what a walk would return. When one
// did (a backlog), the claim takes nothing and says so (capped), and
// claimOwned walks the branches at once: a claim always takes the oldest
// ready events of its shards, in id order.
//
// The statement holds only what every claim needs, since PostgreSQL sets
// up every node of a plan for each execution, whether it runs or not: a
// claim that finds one event or none costs mostly that set-up. So what
// few claims need is done after the claim by claimOwned: the walk after a
// capped run (above), the parking of held rows (the statement returns
// their ids, and park rechecks that each is still held), and the burial
// of a row whose id is the largest bigint: a claim's ids are ranges, and
// a range cannot end past it, so such a row is never claimed but buried
// once a claim finds it ready (it is the last of its key: every later row
// gets a smaller id from the sequence) rather than failing every claim.
// With parkHeld (for ClaimOwnedReads, whose EXPLAIN returns no result
// row) the statement parks and buries them itself, so that EXPLAIN counts
// those reads too.
//
// judged: each candidate held or not by an earlier row of its key.
// taken: the others up to $8 payload bytes, by a running
// sum in id order (the first always: an event over the bound goes alone).
// The cut is a prefix in id order of the rows not held, which are, for
// each key, a prefix of its ready rows (a key's rows after a held one are
// held too): every row of a key after one left out is left out as well,
// as under the LIMIT, and a later claim takes them in order. octet_length
// of a bytea reads the stored length, never a TOASTed payload, and the
// candidates' heap rows are read anyway (status, next_attempt_at), so the
// bound costs the claim a sort of its candidates and nothing per byte.
func (s *Store) ownedClaimSQL(walk, runs int, parkHeld bool) string {
	key := s.table + "#" + strconv.Itoa(walk) + "#" + strconv.Itoa(runs) + "#" + strconv.FormatBool(parkHeld)
	if q, ok := ownedSQL.Load(key); ok {
		return q.(string)
	}
	expr := shardExpr("o")
	rest := ` AND o.status = 'NEW' AND NOT o.parked AND (o.next_attempt_at <= now() OR o.next_attempt_at <= o.created_at) AND NOT (o.id <@ (SELECT r FROM mine))`
	var b strings.Builder
	b.WriteString(`WITH held AS (
	SELECT s.shard FROM ` + s.shardsTable() + ` s
	WHERE s.shard BETWEEN ($6::int[])[1] AND ($6::int[])[cardinality($6::int[])] AND s.owner = $1 AND s.epoch = ($7::bigint[])[s.shard + 1] AND s.lease_until > now()
), others AS MATERIALIZED (
	SELECT c.shards FROM ` + s.claimsTable() + ` c WHERE c.owner <> $1 AND c.lease_until > now()
), ok AS (
	SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM others o WHERE o.shards IS NULL OR o.shards && h.a) THEN h.a
		ELSE ARRAY(SELECT x FROM unnest(h.a) x WHERE NOT EXISTS (SELECT 1 FROM others o WHERE o.shards IS NULL OR x = ANY(o.shards))) END AS a
	FROM (SELECT COALESCE(array_agg(shard), '{}') AS a FROM held) h
), mine AS (
	SELECT COALESCE(range_agg(c.ids), '{}') AS r FROM ` + s.claimsTable() + ` c WHERE c.owner = $1
)`)
	if runs > 0 {
		b.WriteString(`, ranged AS MATERIALIZED (
	SELECT u.id, u.event_key, u.shard, u.size, u.run FROM (`)
		for i := range runs {
			if i > 0 {
				b.WriteString("\n\tUNION ALL ")
			}
			lo, hi := "($9::int[])["+strconv.Itoa(i+1)+"]", "($10::int[])["+strconv.Itoa(i+1)+"]"
			b.WriteString(`(SELECT o.id, o.event_key, ` + expr + ` AS shard, octet_length(o.payload) AS size, ` + strconv.Itoa(i) + ` AS run FROM ` + s.table + ` o WHERE ` + expr + ` BETWEEN ` + lo + ` AND ` + hi +
				` AND ` + expr + ` = ANY((SELECT a FROM ok)::int[])` + rest + ` ORDER BY ` + expr + `, o.id LIMIT 4 * $4)`)
		}
		b.WriteString(`) u
), capped AS (
	SELECT EXISTS (SELECT 1 FROM ranged GROUP BY run HAVING count(*) >= 4 * $4) AS c
)`)
	}
	b.WriteString(`, cand AS (`)
	if runs > 0 {
		// A capped run means a backlog: this claim takes nothing and says
		// so, and claimOwned walks the branches at once.
		b.WriteString(`
	SELECT r.id, r.event_key, r.shard, r.size FROM ranged r WHERE NOT (SELECT c FROM capped) ORDER BY r.id LIMIT $4`)
		walk = 0
	}
	if walk > 0 {
		b.WriteString(`(SELECT u.id, u.event_key, u.shard, u.size FROM (`)
	}
	for i := range walk {
		if i > 0 {
			b.WriteString("\n\tUNION ALL ")
		}
		n := "($6::int[])[" + strconv.Itoa(i+1) + "]"
		b.WriteString(`(SELECT o.id, o.event_key, ` + n + ` AS shard, octet_length(o.payload) AS size FROM ` + s.table + ` o WHERE ` + expr + ` = ` + n +
			rest + ` AND (SELECT ` + n + ` = ANY(a) FROM ok) ORDER BY o.id)`)
	}
	if walk > 0 {
		b.WriteString(`) u ORDER BY u.id LIMIT $4)`)
	}
	b.WriteString(`
), judged AS (
	SELECT c.id, c.event_key, c.shard, c.size, (` + s.holdSQL("$3::bool") + `) AS held FROM cand c
), taken AS (
	SELECT t.id, t.event_key, t.shard FROM (
		SELECT j.id, j.event_key, j.shard, row_number() OVER w AS n, sum(j.size) OVER w AS bytes
		FROM judged j WHERE NOT j.held WINDOW w AS (ORDER BY j.id)) t
	WHERE t.n = 1 OR t.bytes <= $8
`)
	if parkHeld {
		b.WriteString(`), parking AS (
	UPDATE ` + s.table + ` t SET parked = true WHERE t.id = ANY(ARRAY(SELECT id FROM judged WHERE held)) AND NOT t.parked RETURNING 1
), edge AS (
	UPDATE ` + s.table + ` t ` + buryMaxID + `
	WHERE t.id = ANY(ARRAY(SELECT id FROM taken WHERE id = ` + maxID + `)) AND t.status = 'NEW' RETURNING 1`)
	}
	b.WriteString(`), ins AS (
	INSERT INTO ` + s.claimsTable() + ` (owner, epoch, lease_until, ids, n, shards)
	SELECT $1, $2, now() + $5 * interval '1 microsecond', range_agg(int8range(id, id, '[]')), count(*), array_agg(DISTINCT shard)
	FROM taken WHERE id < ` + maxID + ` HAVING count(*) > 0
	RETURNING lease_until, n
)
SELECT (SELECT lease_until FROM ins), COALESCE((SELECT n FROM ins), 0), (SELECT count(*) FROM held), ARRAY(SELECT id FROM judged WHERE held), (SELECT count(*) FROM judged WHERE NOT held), `)
	if runs > 0 {
		b.WriteString(`(SELECT c FROM capped)`)
	} else {
		b.WriteString(`false`)
	}
	b.WriteString(`, EXISTS (SELECT 1 FROM taken WHERE id = ` + maxID + `)`)
	q, _ := ownedSQL.LoadOrStore(key, b.String())
	return q.(string)
}

// claimReadSQL reads the events of the claim ($1 owner, $2 epoch), range
// by range along the primary key.
func (s *Store) claimReadSQL() string {
	return "SELECT " + prefixed(eventCols, "o.") + " FROM (SELECT unnest(k.ids) AS r FROM " + s.claimsTable() + " k WHERE k.owner = $1 AND k.epoch = $2) c JOIN " + s.table + " o ON o.id >= lower(c.r) AND o.id < upper(c.r)"
}

// Claim takes up to req.Limit ready events from the shards of
// req.Shards that req.Lease.Owner still holds under their epochs and that
// no live claim of another owner touches, in id order. One round trip and
// one transaction: the claim, then the read of its events, then COMMIT;
// rarely more (see ownedClaimSQL): the walk after a capped run, and after
// the claim's COMMIT the parking of held rows or a burial.
// ErrLeaseLost when the owner holds none of the shards any more
// (its view is stale: Balance again).
//
// A claim whose candidates were all held parks them and claims nothing;
// it then runs again at once (up to maxParkingRounds times), so a relay
// does not take an empty claim behind a held key's backlog for "caught
// up" while other keys wait. A round that buried rows returns at once,
// so that its burials reach the relay.
func (s *Store) Claim(ctx context.Context, req driver.ClaimParams) (driver.Claim, error) {
	for round := 1; ; round++ {
		c, _, parked, err := s.claimOwned(ctx, req, false, false)
		if err != nil || len(c.Events) > 0 || len(c.Buried) > 0 || parked == 0 || round == maxParkingRounds {
			return c, err
		}
	}
}

// maxParkingRounds bounds the claims one Claim runs while each only
// parks rows (each reads at most about three rows per row of its batch).
const maxParkingRounds = 8

// ClaimOwnedReads is Claim run under EXPLAIN ANALYZE: it also returns
// how many rows of the outbox table the claim statement read (index
// entries and heap rows its scans returned or filtered out). For tests and
// diagnosis: a claim should read about as many rows as it claims and
// parks, whatever the backlog behind it. Its statement parks and buries
// itself (see ownedClaimSQL), so a largest-bigint row it buries is not in
// the claim's Buried.
func (s *Store) ClaimOwnedReads(ctx context.Context, req driver.ClaimParams) (driver.Claim, int64, error) {
	c, reads, _, err := s.claimOwned(ctx, req, true, false)
	return c, reads, err
}

// claimOwned runs one claim (walking the branches whatever the owner's last
// claim found, with walk); it also returns the rows of the table its
// statement read (with explain) and how many rows it found held (without):
// parked, or claimable again by the next claim if their key's earlier row
// was settled meanwhile.
func (s *Store) claimOwned(ctx context.Context, req driver.ClaimParams, explain, walk bool) (driver.Claim, int64, int64, error) {
	req = req.WithDefaults()
	c := driver.Claim{Lease: req.Lease}
	if len(req.Shards) == 0 {
		return c, 0, 0, nil
	}
	leases := slices.Clone(req.Shards)
	slices.SortFunc(leases, func(a, b driver.ShardLease) int { return cmp.Compare(a.Shard, b.Shard) })
	leases = slices.CompactFunc(leases, func(a, b driver.ShardLease) bool { return a.Shard == b.Shard })
	shards := make([]int, len(leases))
	epochs := make([]int64, numShards) // by shard, see ownedClaimSQL
	for i := range epochs {
		epochs[i] = -1
	}
	for i, l := range leases {
		if l.Shard < 0 || l.Shard >= numShards {
			return c, 0, 0, fmt.Errorf("pgstore: claim: shard %d does not exist: a table has shards 0 to %d", l.Shard, numShards-1)
		}
		shards[i], epochs[l.Shard] = l.Shard, l.Epoch
	}
	claims := s.claimsTable()
	// A relay that keeps up claims often and finds little: each wake-up
	// of the commit probe or a notification, and each look again after a
	// batch, claims. One branch per shard (a merge in id order that reads
	// only as far as the batch needs, whatever the backlog) costs a walk
	// of the shard index per shard, several times what the rows cost. So
	// while its last claim took less than half its batch, a claim reads
	// its shards by runs of consecutive ones (Balance hands out shards in
	// order, so a relay's are one run or a few), each run one range scan
	// of the shard index that stops after four batches' rows, and sorts
	// what it read by id (see ownedClaimSQL): one round trip, where a
	// probe for the shards with pending rows and then a claim over those
	// took two, and little read when little is pending. A run that
	// reached its cap means a backlog: that claim takes nothing and the
	// branches are walked at once, and after a claim that filled at least
	// half its batch the next one walks them from the start.
	_, busy := s.busyOwners.Load(req.Lease.Owner)
	var lows, highs []int
	if !explain && !busy && !walk {
		for i, sh := range shards {
			if i > 0 && sh == shards[i-1]+1 {
				highs[len(highs)-1] = sh
				continue
			}
			lows, highs = append(lows, sh), append(highs, sh)
		}
	}
	runs := 0
	if len(lows) > 0 {
		runs = ownedBranches(len(lows))
	}
	branches := ownedBranches(len(shards))
	if runs > 0 {
		branches = 0 // a capped run claims nothing and walks next
	}
	sql := s.ownedClaimSQL(branches, runs, explain)
	if explain {
		sql = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	// The settings, and one claim of an owner at a time (a relay
	// serializes its claims; the lock keeps two processes misnamed alike
	// from claiming the same rows): one statement, as every statement of
	// the pipeline costs the claim's round trip some of its time. The
	// same lock fences a takeover: Balance takes a free or expired shard
	// only when it can take its last owner's claim lock (so no claim of that
	// owner is in flight, and one that starts after waits for the
	// takeover's commit, then sees the shard's new epoch), and the claim
	// statement below takes only shards this owner holds under their
	// epochs. A claim that began before its lease ran out therefore
	// commits before any other relay takes its shards, and the next
	// owner's claims see its claim rows.
	b.Queue(claimSettings+", pg_advisory_xact_lock($1::int, hashtext($2::text))", int32(s.claimLock), req.Lease.Owner)
	// Take over the expired claims touching these shards (rows locked in
	// one order, so two claimers cannot deadlock); deleting one waits for
	// a stale holder's state change in progress, as in Claim.
	b.Queue("DELETE FROM "+claims+" WHERE (owner, epoch) IN (SELECT owner, epoch FROM "+claims+" WHERE lease_until <= now() AND (shards IS NULL OR shards && $1::int[]) ORDER BY owner, epoch FOR UPDATE)", shards)
	maxBytes := req.MaxBytes
	if maxBytes <= 0 {
		maxBytes = math.MaxInt64
	}
	if runs > 0 {
		b.Queue(sql, req.Lease.Owner, req.Lease.Epoch, req.HoldDeadKeys, req.Limit, req.LeaseFor.Microseconds(), shards, epochs, maxBytes, lows, highs)
	} else {
		b.Queue(sql, req.Lease.Owner, req.Lease.Epoch, req.HoldDeadKeys, req.Limit, req.LeaseFor.Microseconds(), shards, epochs, maxBytes)
	}
	// The claimed events are read in the claim's own transaction, before
	// its COMMIT (a second transaction cost the round trip two statements
	// more): a read that fails rolls the claim back with it.
	b.Queue(s.claimReadSQL(), req.Lease.Owner, req.Lease.Epoch)
	b.Queue("COMMIT")
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	for range 3 { // BEGIN, the settings and lock, the DELETE
		if _, err := br.Exec(); err != nil {
			return driver.Claim{}, 0, 0, wrap("claim", err)
		}
	}
	// ready: the candidates not held, before MaxBytes cut them
	var n, held, parked, ready int64
	var reads int64
	var holdIDs []int64
	var capped, edge bool
	if explain {
		var plan []byte
		if err := br.QueryRow().Scan(&plan); err != nil {
			return driver.Claim{}, 0, 0, wrap("claim", err)
		}
		var err error
		if reads, err = planReads(plan, s.opts.Table); err != nil {
			return driver.Claim{}, 0, 0, err
		}
		// EXPLAIN returns no result rows: the counts come from the claim row.
		held = int64(len(shards))
	} else {
		var until *time.Time
		if err := br.QueryRow().Scan(&until, &n, &held, &holdIDs, &ready, &capped, &edge); err != nil {
			return driver.Claim{}, 0, 0, wrap("claim", err)
		}
		if until != nil {
			c.Until = *until
		}
	}
	rows, err := br.Query()
	if err != nil {
		return driver.Claim{}, 0, 0, wrap("claim", err)
	}
	c.Events = make([]outbox.Event, 0, n)
	var headers []byte
	var created pgtype.Timestamptz
	var bad map[int64]error
	for rows.Next() {
		c.Events = append(c.Events, outbox.Event{})
		e := &c.Events[len(c.Events)-1]
		if err := rows.Scan(&e.ID, &e.EventID, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.SchemaVersion, &e.Payload, &e.ContentType, &headers, &e.Attempts, &created); err != nil {
			rows.Close()
			return driver.Claim{}, 0, 0, wrap("claim", err)
		}
		var err error
		e.Headers, err = driver.DecodeHeaders(headers)
		if created.InfinityModifier != pgtype.Finite {
			// the created_at domain refuses it; a table of another
			// shape may hold it: the row is buried
			err = driver.BadRow("created_at is %s: write the time the event happened (or leave the column's default, now())", map[pgtype.InfinityModifier]string{pgtype.Infinity: "'infinity'", pgtype.NegativeInfinity: "'-infinity'"}[created.InfinityModifier])
		}
		e.CreatedAt = created.Time
		if err != nil {
			if bad == nil {
				bad = map[int64]error{}
			}
			bad[e.ID] = err
		}
	}
	if err := rows.Err(); err != nil {
		return driver.Claim{}, 0, 0, wrap("claim", err)
	}
	if _, err := br.Exec(); err != nil { // COMMIT
		return driver.Claim{}, 0, 0, wrap("claim", err)
	}
	if err := br.Close(); err != nil {
		return driver.Claim{}, 0, 0, wrap("claim", err)
	}
	if explain {
		n = int64(len(c.Events))
		ready = n
		if n > 0 {
			if err := s.pool.QueryRow(ctx, "SELECT lease_until FROM "+claims+" WHERE owner = $1 AND epoch = $2", req.Lease.Owner, req.Lease.Epoch).Scan(&c.Until); err != nil {
				return driver.Claim{}, 0, 0, wrap("claim", err)
			}
		}
	}
	if held == 0 {
		return driver.Claim{}, reads, 0, fmt.Errorf("pgstore: claim: owner %q holds none of the %d shards asked for (%s) under their epochs any more: %w", req.Lease.Owner, len(shards), fmtShards(leases), driver.ErrLeaseLost)
	}
	if len(c.Events) != int(n) {
		return driver.Claim{}, reads, 0, fmt.Errorf("pgstore: claim: read %d of the %d events claimed", len(c.Events), n)
	}
	if capped {
		// a backlog behind a run: walk the branches now
		return s.claimOwned(ctx, req, explain, true)
	}
	// The claim has committed: what follows only saves later claims work,
	// so a failure of it leaves the claim as it is (the next claim judges
	// those rows again, and finds a largest-bigint row again).
	if len(holdIDs) > 0 {
		_ = s.park(ctx, holdIDs, req.HoldDeadKeys)
		parked = int64(len(holdIDs))
	}
	if n == 0 {
		c.Events = nil
	}
	byID := func(a, b outbox.Event) int { return cmp.Compare(a.ID, b.ID) }
	if !slices.IsSortedFunc(c.Events, byID) {
		slices.SortFunc(c.Events, byID)
	}
	// A claim that MaxBytes cut short counts as the claim it would have
	// been: it left ready rows behind.
	if int(ready)+int(parked) < req.Limit {
		s.caughtUp()
	}
	if int(ready)+int(parked) >= max(req.Limit/2, 1) {
		s.busyOwners.Store(req.Lease.Owner, struct{}{})
	} else {
		s.busyOwners.Delete(req.Lease.Owner)
	}
	if err = driver.ScreenClaim(ctx, &c, bad, req.HoldDeadKeys, s.Bury, s.Release); err != nil {
		return driver.Claim{}, reads, parked, fmt.Errorf("pgstore: claim: %w", err)
	}
	if edge && s.buryEdge(ctx) == nil {
		// reported like the burials above, so that the relay logs and
		// counts it (after them: a claim that failed above returns no
		// burial, and the next claim finds the row again)
		c.Buried = append(c.Buried, driver.Burial{ID: math.MaxInt64, Error: maxIDReason})
	}
	return c, reads, parked, nil
}

// park marks parked the rows of ids that an earlier row of their key
// still holds (rechecked: it may have been settled since the claim judged
// them), after the claim that found them held: each later claim then skips
// them (the shard index holds no parked row) until their key's earlier
// row is settled, which unparks them. Parking is only that shortcut, and
// is not fenced: a row left unparked is judged held again by the next
// claim, and a row parked whose key nothing holds any more (its earlier
// row settled between the recheck and this commit, or a relay that lost
// its shards parked it) is unparked by the sweep.
func (s *Store) park(ctx context.Context, ids []int64, hold bool) error {
	_, err := s.afterClaim(ctx, "claim: park", "UPDATE "+s.table+" c SET parked = true WHERE c.id = ANY($1::bigint[]) AND NOT c.parked AND c.status = 'NEW' AND ("+s.holdSQL("$2::bool")+")", ids, hold)
	return err
}

// buryEdge buries a ready row whose id is maxID (see ownedClaimSQL): a
// claim found it among the rows it would take. nil when this call buried
// it; an error too when it found it no longer NEW.
func (s *Store) buryEdge(ctx context.Context) error {
	tag, err := s.afterClaim(ctx, "claim: bury", "UPDATE "+s.table+" "+buryMaxID+" WHERE id = "+maxID+" AND status = 'NEW'")
	if err == nil && tag.RowsAffected() == 0 {
		err = errors.New("pgstore: claim: bury: the row of id " + maxID + " is no longer NEW")
	}
	return err
}

// afterClaim runs one of the claim's follow-up writes under relaySettings
// (by id, whatever the table's statistics say).
func (s *Store) afterClaim(ctx context.Context, op, sql string, args ...any) (pgconn.CommandTag, error) {
	b := &pgx.Batch{}
	b.Queue(relaySettings)
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
	return tag, wrap(op, err)
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
// fair share and marks the shards over it Revoke when another relay is
// short and no free shard is left for it. The database clock throughout.
//
// It is one round trip (a pipeline: the transaction, then the orphan
// sweep), and it waits for no lock a claim holds: a claim locks no shard
// row, and a takeover of a free or expired shard passes over the shards
// whose last owner has a claim in flight (it tries that owner's claim lock, see
// claimOwned) and over the shard rows another heartbeat has locked (FOR
// UPDATE SKIP LOCKED); the renewal itself skips rows another relay's
// takeover has locked (their lease has run out: they are that relay's
// now). A heartbeat that waited behind its own relay's claims (a claim
// stuck behind a stale relay's lock, or just slow on a loaded database)
// let the leases run out and left the relay holding nothing; one that
// took a round trip per statement held its locks across ten round trips
// of a loaded machine, or of a process stopped mid-way.
//
// It also unparks orphans: parked rows whose key no longer has an earlier
// row holding it (a requeue, purge or ack that raced a claim's parking,
// or a parking by a relay that had lost the shard), a bounded number of
// keys per call, after the commit and under a short lock timeout: the
// sweep is a repair that the next heartbeat retries, never a reason for a
// heartbeat to fail.
func (s *Store) Balance(ctx context.Context, req driver.BalanceParams) (driver.Ownership, error) {
	req = req.WithDefaults()
	own := driver.Ownership{Shards: numShards}
	if err := req.Validate(numShards); err != nil {
		return own, fmt.Errorf("pgstore: balance: %w", err)
	}
	release := req.Release
	if release == nil {
		release = []int{}
	}
	shards, relays := s.shardsTable(), s.relaysTable()
	lease := req.LeaseFor.Microseconds()
	S := strconv.Itoa(numShards)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(balanceSettings)
	if req.Leave {
		// a relay that left claims no more: its flag would hold the
		// commit probe back (draining) for the life of the process
		s.busyOwners.Delete(req.Owner)
		b.Queue("UPDATE "+shards+" SET lease_until = '-infinity' WHERE owner = $1", req.Owner)
		b.Queue("DELETE FROM "+relays+" WHERE owner = $1", req.Owner)
		b.Queue("SELECT count(*) FROM " + relays + " WHERE lease_until > now()")
		b.Queue("COMMIT")
		br := s.pool.SendBatch(ctx, b)
		defer br.Close()
		for range 4 {
			if _, err := br.Exec(); err != nil {
				return driver.Ownership{Shards: numShards}, wrap("balance", err)
			}
		}
		if err := br.QueryRow().Scan(&own.Relays); err != nil {
			return driver.Ownership{Shards: numShards}, wrap("balance", err)
		}
		if err := br.Close(); err != nil {
			return driver.Ownership{Shards: numShards}, wrap("balance", err)
		}
		s.endSession(req.Owner)
		return own, nil
	}
	pid := s.session(ctx, req.Owner)
	b.Queue("INSERT INTO "+relays+" (owner, lease_until, pid) VALUES ($1, now() + $2 * interval '1 microsecond', $3) ON CONFLICT (owner) DO UPDATE SET lease_until = EXCLUDED.lease_until, pid = EXCLUDED.pid RETURNING lease_until", req.Owner, lease, pid)
	b.Queue("DELETE FROM " + relays + " WHERE owner IN (SELECT owner FROM " + relays + " WHERE lease_until <= now() - interval '1 minute' FOR UPDATE SKIP LOCKED)")
	// Relays whose session is gone (session.go) lose their leases now,
	// so the take below moves their shards on at once.
	b.Queue(s.reapSQL(), req.Owner, s.sessionKey())
	// Release and renew. A released shard keeps its owner's name with a
	// lease of '-infinity' (free), so a takeover can try that owner's
	// claim lock (below). A shard whose lease ran out but that nobody
	// took is still this owner's (same epoch: nobody held it in between).
	b.Queue("UPDATE "+shards+" s SET lease_until = CASE WHEN s.shard = ANY($3::int[]) THEN '-infinity' ELSE now() + $2 * interval '1 microsecond' END "+
		"WHERE s.shard IN (SELECT shard FROM "+shards+" WHERE owner = $1 AND lease_until > '-infinity' FOR NO KEY UPDATE SKIP LOCKED)", req.Owner, lease, release)
	// Take free shards (released, never held) before expired ones, whose
	// dead owner's claims may still hold events for a while, up to the
	// owner's fair share: the live relays in byte order (not the
	// database's collation: every relay computes the same ranks), the
	// first S mod n of them get one shard more, so the shares sum to S.
	// A shard is taken only when its last owner has no claim in flight
	// (that owner's claim lock, only tried, never waited for: a shard
	// whose lock is held is left to a later heartbeat). A released shard
	// needs the check too: a claim the relay gave up on (its context
	// ended) may still be running on the server, and a claim that has not
	// committed is invisible to the next owner's claims.
	b.Queue(`WITH live AS (SELECT owner FROM `+relays+` WHERE lease_until > now()),
me AS (SELECT count(*) AS n, count(*) FILTER (WHERE owner::text COLLATE "C" < $1::text COLLATE "C") AS rank FROM live),
held AS (SELECT count(*) FILTER (WHERE owner = $1) AS mine FROM `+shards+` WHERE owner <> '' AND lease_until > now())
UPDATE `+shards+` SET owner = $1, epoch = epoch + 1, lease_until = now() + $2 * interval '1 microsecond'
WHERE shard IN (SELECT shard FROM `+shards+` WHERE CASE WHEN lease_until > now() THEN false WHEN owner = '' THEN true
	WHEN owner = $1 AND lease_until > '-infinity' THEN false ELSE pg_try_advisory_xact_lock($3::int, hashtext(owner)) END
	ORDER BY lease_until > '-infinity', shard
	LIMIT (SELECT GREATEST(0, `+S+` / me.n + CASE WHEN me.rank < `+S+` % me.n THEN 1 ELSE 0 END - held.mine) FROM me, held) FOR UPDATE SKIP LOCKED)`, req.Owner, lease, int32(s.claimLock))
	b.Queue("SELECT shard, epoch FROM "+shards+" WHERE owner = $1 AND lease_until > now() ORDER BY shard", req.Owner)
	// Who holds how many live leases: the live relays (with 0) and any
	// other owner still holding some (a relay whose heartbeat lapsed).
	b.Queue("SELECT r.owner, r.live, count(s.shard) FROM (SELECT owner, true AS live FROM " + relays + " WHERE lease_until > now() UNION SELECT DISTINCT owner, false FROM " + shards + " WHERE owner <> '' AND lease_until > now() AND owner NOT IN (SELECT owner FROM " + relays + " WHERE lease_until > now())) r " +
		"LEFT JOIN " + shards + " s ON s.owner = r.owner AND s.lease_until > now() GROUP BY r.owner, r.live")
	b.Queue("COMMIT")
	s.sweepMu.Lock()
	after := s.sweepAfter
	s.sweepMu.Unlock()
	b.Queue(sweepSettings)
	b.Queue(s.sweepSQL(), after, sweepKeys, req.HoldDeadKeys)

	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	fail := func(err error) (driver.Ownership, error) {
		return driver.Ownership{Shards: numShards}, wrap("balance", err)
	}
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return fail(err)
		}
	}
	if err := br.QueryRow().Scan(&own.Until); err != nil {
		return fail(err)
	}
	for range 4 {
		if _, err := br.Exec(); err != nil {
			return fail(err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return fail(err)
	}
	for rows.Next() {
		var l driver.ShardLease
		if err := rows.Scan(&l.Shard, &l.Epoch); err != nil {
			rows.Close()
			return fail(err)
		}
		own.Held = append(own.Held, l)
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	holding := map[string]int{}
	var names []string
	taken := 0
	if rows, err = br.Query(); err != nil {
		return fail(err)
	}
	for rows.Next() {
		var o string
		var live bool
		var n int
		if err := rows.Scan(&o, &live, &n); err != nil {
			rows.Close()
			return fail(err)
		}
		holding[o] = n
		taken += n
		if live {
			names = append(names, o)
		}
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	if _, err := br.Exec(); err != nil { // COMMIT
		return fail(err)
	}
	// The ownership is committed: the sweep's outcome does not change it.
	s.sweepResult(br)

	slices.Sort(names)
	own.Relays = len(names)
	share := func(owner string) int {
		i, _ := slices.BinarySearch(names, owner)
		n := len(names)
		if i < numShards%n {
			return numShards/n + 1
		}
		return numShards / n
	}
	// Revoke the shards over the fair share when other live relays are
	// short of theirs by more than the free shards can make up.
	free := numShards - taken
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
	if len(own.Held) < share(req.Owner) && s.notify {
		// Short of its share (it joined, or a peer holds more): tell
		// the other relays (BalanceNotify) to heartbeat now, not at
		// their next period, so the shards over their share are handed
		// over at once. A hint: the heartbeats do it anyway.
		_, _ = s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", s.channel, balancePayload)
	}
	return own, nil
}

// balancePayload is the payload of a notification on the table's channel
// that asks the relays to heartbeat now (not an enqueue).
const balancePayload = "balance"

// BalanceNotify returns a channel that receives a value soon after a relay
// of the table (in any process) found at its heartbeat that it holds less
// than its share of the shards: the relays holding more heartbeat then, so
// a relay that joins gets its share within milliseconds rather than after
// the others' next heartbeat (LeaseFor/3). A hint, over LISTEN, like
// Notify.
func (s *Store) BalanceNotify(ctx context.Context) <-chan struct{} {
	ch := s.rebalance.Subscribe(ctx)
	s.startListening()
	return ch
}

// balanceSettings are Balance's transaction-local settings: no statement
// of a heartbeat should wait for a lock (a lock wait is a bug or a stuck
// session: fail, and heartbeat again), none is worth a flush before the
// reply (a lost renewal is renewed by the next one), and sequential scans
// are off (see noSeqScan), and with them JIT compilation: enable_seqscan =
// off prices every scan of the small shard and relay tables at 10^10,
// far over jit_above_cost, and each statement was compiled by LLVM,
// 100–600 ms of CPU apiece on a loaded machine for scans of 64 rows: that,
// more than any lock, is what made the heartbeat miss its deadline.
const balanceSettings = "SELECT set_config('statement_timeout', '5000', true), set_config('lock_timeout', '1000', true), set_config('synchronous_commit', 'off', true), set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)"

// sweepSettings are the orphan sweep's (after Balance's commit, in a
// transaction of its own): a row it would unpark that someone else has
// locked (a claim parking it, an ack) makes it give up at once; the next
// heartbeat sweeps again from the same place.
const sweepSettings = "SELECT set_config('statement_timeout', '2000', true), set_config('lock_timeout', '50', true), set_config('synchronous_commit', 'off', true), set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)"

// sweepSQL unparks orphans: it visits up to $2 keys with parked rows (a
// loose index scan of the parked index, from after the key $1 where this
// Store's last sweep stopped, wrapping around), and unparks the lowest
// parked rows of each key that no earlier row holds any more (retrying or
// delayed, or DEAD when $3). Parking is a cache of the claim's hold rule;
// a requeue, purge or ack that commits while a claim parks a row of its
// key can leave the row parked behind nothing, and this is what finds it. It
// returns the last key visited, the keys visited and the rows unparked.
func (s *Store) sweepSQL() string {
	t := s.table
	hc := strings.NewReplacer("c.id", "v.id", "c.event_key", "v.key").Replace(s.holdSQL("$3::bool"))
	return `WITH RECURSIVE k(key, id) AS (
	(SELECT event_key, id FROM ` + t + ` WHERE parked AND event_key > $1 ORDER BY event_key, id LIMIT 1)
	UNION ALL
	(SELECT n.event_key, n.id FROM k CROSS JOIN LATERAL (SELECT event_key, id FROM ` + t + ` WHERE parked AND event_key > k.key ORDER BY event_key, id LIMIT 1) n)
), visited AS (
	SELECT key, id FROM k LIMIT $2
), orphans AS (
	SELECT v.key FROM visited v WHERE NOT (` + hc + `)
), ` + s.unparkCTE("unparked", "SELECT key FROM orphans", "") + `
SELECT COALESCE((SELECT max(key) FROM visited), ''), (SELECT count(*) FROM visited), (SELECT count(*) FROM unparked)`
}

// sweepResult reads the sweep's answer from br (its settings, then the
// sweep) and moves the sweep's place on. A sweep that failed (a locked
// row, a timeout) leaves it where it was: the next heartbeat retries.
func (s *Store) sweepResult(br pgx.BatchResults) {
	if _, err := br.Exec(); err != nil {
		return
	}
	var last string
	var visited, unparked int64
	if err := br.QueryRow().Scan(&last, &visited, &unparked); err != nil {
		return
	}
	if visited < sweepKeys {
		last = ""
	}
	s.sweepMu.Lock()
	s.sweepAfter = last
	s.sweepMu.Unlock()
	if unparked > 0 {
		s.signal()
	}
}

// planReads sums, over an EXPLAIN (ANALYZE, FORMAT JSON) plan, the rows
// every scan of table returned or filtered out, times its loops.
func planReads(plan []byte, table string) (int64, error) {
	var root []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &root); err != nil || len(root) == 0 {
		return 0, fmt.Errorf("pgstore: claim: reading the EXPLAIN output: %v", err)
	}
	var sum func(n *planNode) float64
	sum = func(n *planNode) float64 {
		var r float64
		if n.Relation == table && strings.Contains(n.Type, "Scan") {
			r = (n.Rows + n.Filtered + n.Rechecked) * n.Loops
		}
		for i := range n.Plans {
			r += sum(&n.Plans[i])
		}
		return r
	}
	return int64(sum(&root[0].Plan) + 0.5), nil
}

// planNode is the part of an EXPLAIN JSON node planReads reads.
type planNode struct {
	Type      string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	Rows      float64    `json:"Actual Rows"`
	Loops     float64    `json:"Actual Loops"`
	Filtered  float64    `json:"Rows Removed by Filter"`
	Rechecked float64    `json:"Rows Removed by Index Recheck"`
	Plans     []planNode `json:"Plans"`
}
