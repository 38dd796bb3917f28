package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/pgstore"
)

// waitLocked waits until a statement on table waits for a lock.
func waitLocked(t *testing.T, pool *pgxpool.Pool, table string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%'||$1||'%' AND pid <> pg_backend_pid()", table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing waited for the lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lockExpiredClaim writes an expired claim of owner "stale" and returns a
// transaction holding it locked, as a stale relay stopped mid-write would:
// a claim of the table waits behind it (it deletes the expired claims of
// its shards first) until the transaction ends (rolled back at t's end).
func lockExpiredClaim(t *testing.T, pool *pgxpool.Pool, table string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "INSERT INTO "+table+"_claims (owner, epoch, lease_until, ids, n) VALUES ('stale', 1, now() - interval '1 hour', '{}', 0)"); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+table+"_claims WHERE owner = 'stale' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	return tx
}

// Balance is a heartbeat: it must renew an owner's leases while that
// owner's own claim is stuck (here behind an expired claim a stale relay
// still has locked, as after a SIGSTOP mid-write), while another relay's
// takeover holds shard rows, and while the orphan sweep's rows are locked
// by someone else. Each blocker is held until Balance has returned, so a
// Balance that waited for any of them fails its deadline.
func TestBalanceNotBehindLocks(t *testing.T) {
	pool, _ := openPool(t)
	ctx := context.Background()
	st, table := migratedStore(t, pool, "ballock_", pgstore.Config{})
	const lease = 20 * time.Second
	first, err := st.Balance(ctx, driver.BalanceParams{Owner: "a", LeaseFor: lease})
	if err != nil || len(first.Held) != 64 {
		t.Fatalf("Balance: %d shards, %v; want 64", len(first.Held), err)
	}
	var batch []outbox.Message
	for i := range 10 {
		batch = append(batch, outbox.Message{Topic: "t", Key: fmt.Sprint("k", i), Type: "T", Payload: []byte("{}")})
	}
	if err := st.Enqueue(ctx, batch...); err != nil {
		t.Fatal(err)
	}
	balanceWithin := func(what string, req driver.BalanceParams) driver.Ownership {
		t.Helper()
		bctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		start := time.Now()
		own, err := st.Balance(bctx, req)
		if err != nil {
			t.Fatalf("Balance %s: %v (after %s)", what, err, time.Since(start))
		}
		t.Logf("Balance %s: %s", what, time.Since(start).Round(time.Millisecond))
		return own
	}

	// 1. The owner's own claim holds its claim lock and waits behind an
	// expired claim locked by a stale holder.
	stale := lockExpiredClaim(t, pool, table)
	claimed := make(chan error, 1)
	go func() {
		_, err := st.Claim(ctx, driver.ClaimParams{Lease: driver.Lease{Owner: "a", Epoch: 1}, Limit: 5, LeaseFor: lease, Shards: first.Held})
		claimed <- err
	}()
	waitLocked(t, pool, table)
	time.Sleep(50 * time.Millisecond) // the claim holds the owner's claim lock
	time.Sleep(10 * time.Millisecond) // a later lease end is visible to now()
	renewed := balanceWithin("while its own claim is stuck", driver.BalanceParams{Owner: "a", LeaseFor: lease})
	if len(renewed.Held) != 64 || !renewed.Until.After(first.Until) {
		t.Fatalf("Balance beside a stuck claim held %d shards until %s (was %s); want 64, renewed", len(renewed.Held), renewed.Until, first.Until)
	}
	// Another relay joins: its share is revoked from a, not taken.
	if own := balanceWithin("of a joining relay", driver.BalanceParams{Owner: "b", LeaseFor: lease}); len(own.Held) != 0 {
		t.Fatalf("b took %d of a's live shards", len(own.Held))
	}
	if err := stale.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-claimed; err != nil {
		t.Fatal(err)
	}

	// 2. Another relay's takeover holds a shard row (locked as Balance's
	// takeover locks it).
	take, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer take.Rollback(ctx) //nolint:errcheck // released below
	if _, err := take.Exec(ctx, "SELECT shard FROM "+table+"_shards WHERE owner = 'a' AND shard < 3 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	own := balanceWithin("beside another relay's takeover", driver.BalanceParams{Owner: "a", LeaseFor: lease})
	if len(own.Held) != 64 {
		t.Fatalf("Balance beside a takeover holds %d shards; want 64", len(own.Held))
	}
	if err := take.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// 3. The orphan sweep's row is locked by another transaction.
	if _, err := pool.Exec(ctx, "UPDATE "+table+" SET parked = true WHERE id = (SELECT min(id) FROM "+table+")"); err != nil {
		t.Fatal(err)
	}
	row, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer row.Rollback(ctx) //nolint:errcheck // released below
	if _, err := row.Exec(ctx, "SELECT id FROM "+table+" WHERE parked FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	balanceWithin("while the sweep's row is locked", driver.BalanceParams{Owner: "a", LeaseFor: lease, HoldDeadKeys: true})
	if err := row.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The sweep catches up once the row is free.
	deadline := time.Now().Add(10 * time.Second)
	for parkedCount(t, pool, table) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the orphan stayed parked after its lock was released")
		}
		balanceWithin("sweeping", driver.BalanceParams{Owner: "a", LeaseFor: lease, HoldDeadKeys: true})
	}
}

func parkedCount(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table+" WHERE parked").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// balanceLoad runs relays claim loops (one claim at a time per relay, as a
// relay serializes its claims; acks in the background, as its workers
// settle) over a backlog while each relay also heartbeats every period
// with a deadline of deadline; it returns every Balance's duration and the
// failures.
func balanceLoad(tb testing.TB, relays int, dur, period, deadline time.Duration) (times []time.Duration, failures []error, claimed int64) {
	tb.Helper()
	pool, _ := openPool(tb)
	st, table := migratedStore(tb, pool, "balload_", pgstore.Config{VacuumAfter: -1})
	if _, err := pool.Exec(context.Background(), "INSERT INTO "+table+" (topic, event_key, event_type, payload) SELECT 'orders', 'k-' || (g % 1000), 'T', '\\x7b7d' FROM generate_series(1, 200000) g"); err != nil {
		tb.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), "ANALYZE "+table); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var mu sync.Mutex
	var claimErrs []error
	defer func() {
		for _, err := range claimErrs {
			tb.Log("claim:", err)
		}
	}()
	var n atomic.Int64
	var wg sync.WaitGroup
	for r := range relays {
		owner := fmt.Sprintf("r%d", r)
		var rmu sync.Mutex // a relay's claim, and its view of the shards
		var live, revoked []driver.ShardLease
		var inflight sync.WaitGroup
		var acks atomic.Int64 // unsettled claims
		wg.Add(2)
		go func() { // heartbeat: releases revoked shards once settled
			defer wg.Done()
			for ctx.Err() == nil {
				req := driver.BalanceParams{Owner: owner, LeaseFor: 3 * period, HoldDeadKeys: true}
				rmu.Lock()
				if acks.Load() == 0 {
					for _, l := range revoked {
						req.Release = append(req.Release, l.Shard)
					}
				}
				rmu.Unlock()
				bctx, c := context.WithTimeout(context.Background(), deadline)
				start := time.Now()
				own, err := st.Balance(bctx, req)
				c()
				d := time.Since(start)
				mu.Lock()
				times = append(times, d)
				if err != nil && ctx.Err() == nil {
					failures = append(failures, err)
				}
				mu.Unlock()
				if err == nil {
					rmu.Lock()
					live, revoked = nil, nil
					for _, l := range own.Held {
						if l.Revoke {
							revoked = append(revoked, l)
						} else {
							live = append(live, l)
						}
					}
					rmu.Unlock()
				}
				select {
				case <-ctx.Done():
				case <-time.After(period - min(d, period)):
				}
			}
		}()
		go func() { // claims, acked in the background
			defer wg.Done()
			defer inflight.Wait()
			for epoch := int64(1); ctx.Err() == nil; epoch++ {
				lease := driver.Lease{Owner: owner, Epoch: epoch}
				rmu.Lock()
				c, err := st.Claim(ctx, driver.ClaimParams{Lease: lease, Limit: 200, LeaseFor: 10 * time.Second, HoldDeadKeys: true, Shards: live})
				if err == nil && len(c.Events) > 0 {
					acks.Add(1)
				}
				rmu.Unlock()
				if err != nil {
					mu.Lock()
					if ctx.Err() == nil && len(claimErrs) < 3 {
						claimErrs = append(claimErrs, err)
					}
					mu.Unlock()
				}
				if err != nil || len(c.Events) == 0 {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				n.Add(int64(len(c.Events)))
				inflight.Add(1)
				go func() {
					defer inflight.Done()
					defer acks.Add(-1)
					_ = st.AckClaim(context.Background(), driver.AckClaimParams{Lease: lease, N: len(c.Events)})
				}()
			}
		}()
	}
	wg.Wait()
	return times, failures, n.Load()
}

// Heartbeats keep working while every relay claims as fast as it can: no
// Balance fails its deadline (a generous one here: this asserts that a
// heartbeat is not starved or locked out, not its speed, which
// BenchmarkBalanceUnderClaims measures).
func TestBalanceUnderClaims(t *testing.T) {
	times, failures, claimed := balanceLoad(t, 3, 6*time.Second, 300*time.Millisecond, 5*time.Second)
	if len(failures) > 0 {
		t.Fatalf("%d of %d heartbeats failed under claims, first: %v", len(failures), len(times), failures[0])
	}
	if claimed == 0 {
		t.Fatal("nothing was claimed: the load test loaded nothing")
	}
	slices.Sort(times)
	t.Logf("%d heartbeats beside %d claimed events: p50 %s, max %s", len(times), claimed, times[len(times)/2], times[len(times)-1])
}

// BenchmarkBalanceUnderClaims measures Balance's duration while 3 relays
// claim a 1,000-key backlog as fast as they can (each relay heartbeats
// every 200 ms with the relay's deadline for a 2 s lease, 1 s): the
// median, p99 and max, and the share of heartbeats that failed.
func BenchmarkBalanceUnderClaims(b *testing.B) {
	for i := 0; i < b.N; i++ {
		times, failures, claimed := balanceLoad(b, 3, 10*time.Second, 200*time.Millisecond, time.Second)
		slices.Sort(times)
		q := func(p float64) float64 { return float64(times[int(p*float64(len(times)-1))].Microseconds()) / 1000 }
		b.ReportMetric(q(0.5), "p50-ms")
		b.ReportMetric(q(0.99), "p99-ms")
		b.ReportMetric(q(1), "max-ms")
		b.ReportMetric(100*float64(len(failures))/float64(len(times)), "failed-%")
		b.ReportMetric(float64(claimed)/10, "claimed/s")
	}
}
