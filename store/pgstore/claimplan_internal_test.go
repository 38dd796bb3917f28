package pgstore

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox/store/driver"
)

// TestClaimPlanAfterVacuum checks the claim statement's generic plan
// (the one a relay's connection keeps) once a plain VACUUM has given the
// tables their sizes, as the store's own vacuum does after its first
// 20,000 deleted rows: no node may handle more rows than the shards asked for
// allow. A join of the shard rows to the unnested arguments got, from
// those statistics, a nested loop that rescanned the arguments once per
// shard row (64 × 64 rows: 0.4 ms of a 0.6 ms claim of one event).
func TestClaimPlanAfterVacuum(t *testing.T) {
	pool, s := unmigratedStore(t)
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	own, err := s.Balance(ctx, driver.BalanceParams{Owner: "a", LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var shards []string
	epochs := make([]string, numShards) // by shard, as claimOwned passes them
	for i := range epochs {
		epochs[i] = "-1"
	}
	for _, l := range own.Held {
		shards = append(shards, strconv.Itoa(l.Shard))
		epochs[l.Shard] = strconv.FormatInt(l.Epoch, 10)
	}
	if len(shards) != numShards {
		t.Fatalf("a lone relay holds %d shards; want %d", len(shards), numShards)
	}
	// claims and acks, so the claims table has had rows, then statistics
	for i := range 50 {
		if _, err := pool.Exec(ctx, "INSERT INTO "+s.table+" (topic, event_key, event_type) VALUES ('orders', $1, 'X')", "k-"+strconv.Itoa(i%10)); err != nil {
			t.Fatal(err)
		}
		l := driver.Lease{Owner: "a", Epoch: int64(i + 1)}
		c, err := s.Claim(ctx, driver.ClaimParams{Lease: l, Limit: 1000, LeaseFor: time.Minute, Shards: own.Held})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AckClaim(ctx, driver.AckClaimParams{Lease: l, N: len(c.Events)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+s.table+" (topic, event_key, event_type) VALUES ('orders', 'k-1', 'X')"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM "+s.table+", "+s.claimsTable()+", "+s.shardsTable()); err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		name string
		sql  string
		args string
	}{
		{"ranged", s.ownedClaimSQL(0, 1), ", ARRAY[0], ARRAY[" + strconv.Itoa(numShards-1) + "]"},
		{"walk", s.ownedClaimSQL(numShards, 0), ""},
	} {
		t.Run(q.name, func(t *testing.T) {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, claimSettings); err != nil {
				t.Fatal(err)
			}
			params := "text, bigint, bool, int, bigint, int[], bigint[], bigint"
			if q.args != "" {
				params += ", int[], int[]"
			}
			if _, err := tx.Exec(ctx, "PREPARE claim_plan_"+q.name+" ("+params+") AS "+q.sql); err != nil {
				t.Fatal(err)
			}
			exec := "EXECUTE claim_plan_" + q.name + " ('a', 1000, false, 1000, 60000000, ARRAY[" + strings.Join(shards, ",") + "], ARRAY[" + strings.Join(epochs, ",") + "]::bigint[], 9223372036854775807" + q.args + ")"
			var plan []byte
			if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+exec).Scan(&plan); err != nil {
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
					most, where = r, n.Type+" "+n.Relation
				}
				for i := range n.Plans {
					walk(&n.Plans[i])
				}
			}
			walk(&root[0].Plan)
			if most > 2*numShards {
				t.Errorf("a node of the claim's generic plan handled %.0f rows (%s), with %d shards asked for and 1 event pending; want at most %d", most, where, numShards, 2*numShards)
			}
		})
	}
}
