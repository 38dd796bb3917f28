package pgstore

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox/store/driver"
)

// The claim keeps one generic plan per connection, and AckClaim may
// (plan_cache_mode auto), made from the statistics of the moment: after a
// plain VACUUM of tables a relay keeps nearly empty (the store's own of
// the outbox and claims tables, autovacuum's of the shards table, which
// every heartbeat rewrites), those say "a few rows".
// These tests make the plans in that state and check that no node of
// them handles more rows than the work asks for, also after a backlog
// has built up behind the plan.

// vacuumedStore is a migrated Store whose relay "a" holds every shard and
// has claimed and acked 50 events, its tables then vacuumed: the state of
// a relay that keeps up. It returns the shards held.
func vacuumedStore(t *testing.T) (*pgxpool.Pool, *Store, []driver.ShardLease) {
	t.Helper()
	pool, s := unmigratedStore(t)
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// no autovacuum or autoanalyze here: one between the backlog and the
	// EXPLAIN would replan, and the test would no longer see the kept plan
	for _, tb := range []string{s.table, s.claimsTable(), s.shardsTable()} {
		if _, err := pool.Exec(ctx, "ALTER TABLE "+tb+" SET (autovacuum_enabled = off)"); err != nil {
			t.Fatal(err)
		}
	}
	own, err := s.Balance(ctx, driver.BalanceParams{Owner: "a", LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(own.Held) != numShards {
		t.Fatalf("a lone relay holds %d shards; want %d", len(own.Held), numShards)
	}
	for i := range 50 {
		enqueueKey(t, pool, s, "k-"+strconv.Itoa(i%10))
		l := driver.Lease{Owner: "a", Epoch: int64(i + 1)}
		c, err := s.Claim(ctx, driver.ClaimParams{Lease: l, Limit: 1000, LeaseFor: time.Minute, Shards: own.Held})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AckClaim(ctx, driver.AckClaimParams{Lease: l, N: len(c.Events)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM "+s.table+", "+s.claimsTable()+", "+s.shardsTable()); err != nil {
		t.Fatal(err)
	}
	return pool, s, own.Held
}

func enqueueKey(t *testing.T, pool *pgxpool.Pool, s *Store, key string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), "INSERT INTO "+s.table+" (topic, event_key, event_type) VALUES ('orders', $1, 'X')", key); err != nil {
		t.Fatal(err)
	}
}

// mostRows runs EXPLAIN ANALYZE of exec in tx and returns the most rows
// one node of the plan handled (returned or filtered out, times its
// loops), and which node.
func mostRows(t *testing.T, tx pgx.Tx, exec string) (float64, string) {
	t.Helper()
	var plan []byte
	if err := tx.QueryRow(context.Background(), "EXPLAIN (ANALYZE, FORMAT JSON) "+exec).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var root []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &root); err != nil || len(root) == 0 {
		t.Fatalf("reading the plan: %v", err)
	}
	var most float64
	var where string
	var walk func(n *planNode)
	walk = func(n *planNode) {
		if r := (n.Rows + n.Filtered) * n.Loops; r > most {
			most, where = r, strings.TrimSpace(n.Type+" "+n.Relation)
		}
		for i := range n.Plans {
			walk(&n.Plans[i])
		}
	}
	walk(&root[0].Plan)
	return most, where
}

// TestClaimPlanAfterVacuum: the claim's plans, made while one event was
// pending, claim one event in few rows once 20,000 more wait. A join of
// the shard rows to the unnested arguments got a nested loop that
// rescanned the arguments once per shard row (64 × 64 rows; a claim of
// one event took 0.63 ms against 0.40–0.44 ms now) once the shards table
// had been vacuumed.
func TestClaimPlanAfterVacuum(t *testing.T) {
	pool, s, held := vacuumedStore(t)
	ctx := context.Background()
	enqueueKey(t, pool, s, "k-1")
	var shards []string
	epochs := make([]string, numShards) // by shard, as claimOwned passes them
	for i := range epochs {
		epochs[i] = "-1"
	}
	for _, l := range held {
		shards = append(shards, strconv.Itoa(l.Shard))
		epochs[l.Shard] = strconv.FormatInt(l.Epoch, 10)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	statements := []struct {
		name string
		sql  string
		args string
	}{
		{"ranged", s.ownedClaimSQL(0, 1, false), ", ARRAY[0], ARRAY[" + strconv.Itoa(numShards-1) + "]"},
		{"walk", s.ownedClaimSQL(numShards, 0, false), ""},
	}
	exec := func(name, args string, limit int) string {
		return "EXECUTE claim_plan_" + name + " ('a', 1000, false, " + strconv.Itoa(limit) + ", 60000000, ARRAY[" + strings.Join(shards, ",") + "], ARRAY[" + strings.Join(epochs, ",") + "]::bigint[], 9223372036854775807" + args + ")"
	}
	// each plan made now, by a claim of the one event (rolled back)
	for _, q := range statements {
		params := "text, bigint, bool, int, bigint, int[], bigint[], bigint"
		if q.args != "" {
			params += ", int[], int[]"
		}
		for _, sql := range []string{"SET plan_cache_mode = force_generic_plan", "BEGIN", claimSettings,
			"PREPARE claim_plan_" + q.name + " (" + params + ") AS " + q.sql, exec(q.name, q.args, 1000), "ROLLBACK"} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				t.Fatal(err)
			}
		}
	}
	// then a backlog behind the event
	if _, err := pool.Exec(ctx, "INSERT INTO "+s.table+" (topic, event_key, event_type) SELECT 'orders', 'x-' || g, 'X' FROM generate_series(1, 20000) g"); err != nil {
		t.Fatal(err)
	}
	for _, q := range statements {
		t.Run(q.name, func(t *testing.T) {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, claimSettings); err != nil {
				t.Fatal(err)
			}
			if most, where := mostRows(t, tx, exec(q.name, q.args, 1)); most > 2*numShards {
				t.Errorf("a node of the claim's generic plan handled %.0f rows (%s) to claim 1 event from %d shards with 20,000 more waiting; want at most %d", most, where, numShards, 2*numShards)
			}
		})
	}
}

// TestClaimReadPlanAfterVacuum: the read of a claim's events, planned
// while the table was nearly empty, must read one event's row once 20,000
// others wait behind it.
func TestClaimReadPlanAfterVacuum(t *testing.T) {
	pool, s, held := vacuumedStore(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, q := range []string{"SET plan_cache_mode = force_generic_plan", "BEGIN", claimSettings,
		"PREPARE read_plan (text, bigint) AS " + s.claimReadSQL(), "EXECUTE read_plan ('a', 0)", "COMMIT"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	enqueueKey(t, pool, s, "k-1")
	if _, err := pool.Exec(ctx, "INSERT INTO "+s.table+" (topic, event_key, event_type) SELECT 'orders', 'x-' || g, 'X' FROM generate_series(1, 20000) g"); err != nil {
		t.Fatal(err)
	}
	l := driver.Lease{Owner: "a", Epoch: 1000}
	c, err := s.Claim(ctx, driver.ClaimParams{Lease: l, Limit: 1, LeaseFor: time.Minute, Shards: held})
	if err != nil || len(c.Events) != 1 {
		t.Fatalf("claim: %d events, %v; want 1", len(c.Events), err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, claimSettings); err != nil {
		t.Fatal(err)
	}
	if most, where := mostRows(t, tx, "EXECUTE read_plan ('a', 1000)"); most > 10 {
		t.Errorf("a node of the claim read's generic plan handled %.0f rows (%s) to read 1 event; want at most 10", most, where)
	}
}

// TestAckPlanAfterVacuum: AckClaim's plan, made while the table was nearly
// empty, must still ack one event in a few rows once 20,000 others, parked,
// wait behind it. Its unparking, a join, walked the whole primary key for
// parked rows (46 ms an ack behind 100,000 rows).
func TestAckPlanAfterVacuum(t *testing.T) {
	pool, s, held := vacuumedStore(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// the generic plan, made now (an ack of nothing) under AckClaim's
	// settings, as a connection that keeps a generic plan makes it
	for _, q := range []string{"SET plan_cache_mode = force_generic_plan", "BEGIN", ackClaimSettings,
		"PREPARE ack_plan (text, bigint) AS " + s.ackClaimSQL(), "EXECUTE ack_plan ('a', 0)", "COMMIT"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// a backlog, and one event of it claimed
	enqueueKey(t, pool, s, "k-1")
	if _, err := pool.Exec(ctx, "INSERT INTO "+s.table+" (topic, event_key, event_type) SELECT 'orders', 'x-' || g, 'X' FROM generate_series(1, 20000) g"); err != nil {
		t.Fatal(err)
	}
	// the backlog parked (held behind their keys, as a claim parks them):
	// the unparking must not walk the parked index either
	if _, err := pool.Exec(ctx, "UPDATE "+s.table+" SET parked = true WHERE event_key LIKE 'x-%'"); err != nil {
		t.Fatal(err)
	}
	l := driver.Lease{Owner: "a", Epoch: 1000}
	c, err := s.Claim(ctx, driver.ClaimParams{Lease: l, Limit: 1, LeaseFor: time.Minute, Shards: held})
	if err != nil || len(c.Events) != 1 {
		t.Fatalf("claim: %d events, %v; want 1", len(c.Events), err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, ackClaimSettings); err != nil {
		t.Fatal(err)
	}
	if most, where := mostRows(t, tx, "EXECUTE ack_plan ('a', 1000)"); most > 10 {
		t.Errorf("a node of the ack's generic plan handled %.0f rows (%s) to ack 1 event; want at most 10", most, where)
	}
}
