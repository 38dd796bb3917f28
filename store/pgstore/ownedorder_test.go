package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/pgstore"
)

// A claim's now() is its transaction's start, and the claim may wait for
// a lock (an expired claim a stale holder has locked) before its
// statement takes a snapshot. A key's later row can then be visible and due
// (its writer began before the claim) while the key's earlier row, whose
// writer began after the claim but committed first, is visible and not
// "due" by the claim's now(). The claim must not hand out the later row
// alone: that let a key's events be published out of order (torture cell
// postgres_nats_poll_keys3, seed 1090828571, versions 175 before 174).
func TestClaimOwnedKeyOrderAcrossClaimStart(t *testing.T) {
	ctx := context.Background()
	pool, _ := openPool(t)
	st, table := migratedStore(t, pool, "ordstart_", pgstore.Config{})
	const owner = "relay-a"
	own, err := st.Balance(ctx, driver.BalanceParams{Owner: owner, LeaseFor: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(own.Held) != 64 {
		t.Fatalf("held %d shards, want 64", len(own.Held))
	}
	msg := func(v string) outbox.Message {
		return outbox.Message{Topic: "t", Key: "k", Type: "T", Payload: []byte(`{"v":` + v + `}`)}
	}

	// A row of another key in k's shard, pending before the claim
	// starts, so the claim has something to read in k's shard whatever
	// its shape: it must begin, wait, and read k's shard.
	kShard, err := st.ShardOf(ctx, "k", 0)
	if err != nil {
		t.Fatal(err)
	}
	other := ""
	for i := 0; other == ""; i++ {
		key := fmt.Sprintf("o%d", i)
		if sh, err := st.ShardOf(ctx, key, 0); err != nil {
			t.Fatal(err)
		} else if sh == kShard {
			other = key
		}
	}
	if err := st.Enqueue(ctx, outbox.Message{Topic: "t", Key: other, Type: "T", Payload: []byte(`{"v":0}`)}); err != nil {
		t.Fatal(err)
	}

	// The later row's writer begins first (its now() is earliest).
	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := late.Exec(ctx, "SELECT now()"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)

	// Something holds the claim back after its transaction began: an
	// expired claim that a stale holder still has locked (the claim
	// deletes the expired claims of its shards before it reads them).
	blocker := lockExpiredClaim(t, pool, table)
	type result struct {
		c   driver.Claim
		err error
	}
	done := make(chan result, 1)
	lease := driver.Lease{Owner: owner, Epoch: 1}
	go func() {
		req := driver.ClaimParams{Lease: lease, Limit: 10, LeaseFor: 30 * time.Second}
		req.Shards = own.Held
		c, err := st.Claim(ctx, req)
		done <- result{c, err}
	}()
	// Wait until the claim waits for the lock (its transaction has begun).
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%'||$1||'%' AND pid <> pg_backend_pid()", table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the claim never waited for the lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	// The earlier row: its writer begins after the claim, commits first.
	if err := st.Enqueue(ctx, msg("1")); err != nil {
		t.Fatal(err)
	}
	if err := st.EnqueuePgxTx(ctx, late, msg("2")); err != nil {
		t.Fatal(err)
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	var ids []int64
	if err := pool.QueryRow(ctx, "SELECT array_agg(id ORDER BY id) FROM "+table+" WHERE event_key = 'k'").Scan(&ids); err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, e := range r.c.Events {
		if e.Key == "k" {
			got = append(got, e.ID)
		}
	}
	// Either both rows, in order, or none: never the later one alone.
	if len(got) == 1 || (len(got) == 2 && (got[0] != ids[0] || got[1] != ids[1])) {
		t.Fatalf("claim took %v of the key's rows %v: the later row without the earlier one", got, ids)
	}
	if len(got) != 2 {
		// both rows were committed before the claim statement's
		// snapshot (it is taken after the lock wait): the claim must
		// have walked k's shard and taken them
		t.Fatalf("claim took %v of the key's rows %v: it did not walk their shard", got, ids)
	}
	t.Logf("claim took %v of %v", got, ids)
}

// TestClaimOwnedLeaseLostOnlyWhenNoShardIsHeld: a claim names all its
// shards; when the only one with a pending row has changed hands, the
// owner still holds the others, so the claim takes nothing and is no
// ErrLeaseLost (which says the owner holds none of the shards it names).
// The claim checks the lease of every shard asked for.
func TestClaimOwnedLeaseLostOnlyWhenNoShardIsHeld(t *testing.T) {
	ctx := context.Background()
	pool, _ := openPool(t)
	st, table := migratedStore(t, pool, "lost_", pgstore.Config{})
	own, err := st.Balance(ctx, driver.BalanceParams{Owner: "a", LeaseFor: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Enqueue(ctx, outbox.Message{Topic: "t", Key: "k", Type: "T", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	shard, err := st.ShardOf(ctx, "k", 0)
	if err != nil {
		t.Fatal(err)
	}
	// another relay took k's shard (a new epoch)
	if _, err := pool.Exec(ctx, "UPDATE "+table+"_shards SET owner = 'b', epoch = epoch + 1 WHERE shard = $1", shard); err != nil {
		t.Fatal(err)
	}
	req := driver.ClaimParams{Lease: driver.Lease{Owner: "a", Epoch: 1}, Limit: 10, LeaseFor: 30 * time.Second, Shards: own.Held}
	c, err := st.Claim(ctx, req)
	if err != nil {
		t.Fatalf("claim over %d shards, one of them lost: %v; want nothing claimed and no error", len(own.Held), err)
	}
	if len(c.Events) != 0 {
		t.Fatalf("claimed %d events from a shard that changed hands", len(c.Events))
	}
	// holding none of the shards it names: ErrLeaseLost
	req.Shards = []driver.ShardLease{{Shard: shard, Epoch: own.Held[shard].Epoch}}
	if _, err := st.Claim(ctx, req); !errors.Is(err, driver.ErrLeaseLost) {
		t.Fatalf("claim over the one lost shard: %v, want ErrLeaseLost", err)
	}
}

// A relay that kept up claims by ranged reads of its runs of shards; when
// a backlog has built up meanwhile, a run reaches its cap, that claim
// takes nothing and the branches are walked at once, in the same Claim:
// the claim returns a full batch, the oldest events, in id order. The
// oldest sit in a higher shard of the run than the 100 newer ones, so the
// capped ranged read (shard by shard, 40 rows) never reaches them.
func TestClaimOwnedBacklogAfterKeepingUp(t *testing.T) {
	ctx := context.Background()
	pool, _ := openPool(t)
	st, table := migratedStore(t, pool, "capped_", pgstore.Config{})
	own, err := st.Balance(ctx, driver.BalanceParams{Owner: "a", LeaseFor: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lease := driver.Lease{Owner: "a", Epoch: 1}
	// keeping up: a claim that finds little
	if err := st.Enqueue(ctx, outbox.Message{Topic: "t", Key: "k", Type: "T"}); err != nil {
		t.Fatal(err)
	}
	c, err := st.Claim(ctx, driver.ClaimParams{Lease: lease, Limit: 10, LeaseFor: time.Minute, Shards: own.Held})
	if err != nil || len(c.Events) != 1 {
		t.Fatalf("claim while keeping up: %d events, %v; want 1", len(c.Events), err)
	}
	if err := st.AckClaim(ctx, driver.AckClaimParams{Lease: lease, N: 1}); err != nil {
		t.Fatal(err)
	}
	// two keys, low in a lower shard than high
	var low, high string
	var lowShard, highShard int
	for i := 0; high == ""; i++ {
		key := fmt.Sprintf("k%d", i)
		sh, err := st.ShardOf(ctx, key, 0)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case low == "" && sh < 32:
			low, lowShard = key, sh
		case sh > lowShard+1 && low != "":
			high, highShard = key, sh
		}
	}
	t.Logf("low key %s in shard %d, high key %s in shard %d", low, lowShard, high, highShard)
	// then a backlog: the 5 oldest in the higher shard, 100 newer ones in
	// the lower
	for _, b := range []struct {
		key string
		n   int
	}{{high, 5}, {low, 100}} {
		if _, err := pool.Exec(ctx, "INSERT INTO "+table+" (topic, event_key, event_type) SELECT 't', $1, 'T' FROM generate_series(1, $2::int)", b.key, b.n); err != nil {
			t.Fatal(err)
		}
	}
	var first int64
	if err := pool.QueryRow(ctx, "SELECT min(id) FROM "+table).Scan(&first); err != nil {
		t.Fatal(err)
	}
	lease.Epoch++
	c, err = st.Claim(ctx, driver.ClaimParams{Lease: lease, Limit: 10, LeaseFor: time.Minute, Shards: own.Held})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Events) != 10 {
		t.Fatalf("the claim behind a backlog of 105 returned %d events; want a batch of 10", len(c.Events))
	}
	for i, e := range c.Events {
		want := high
		if i >= 5 {
			want = low
		}
		if e.ID != first+int64(i) || e.Key != want {
			t.Fatalf("event %d of the claim is id %d of key %s; want id %d of key %s (the oldest, in id order)", i, e.ID, e.Key, first+int64(i), want)
		}
	}
}
