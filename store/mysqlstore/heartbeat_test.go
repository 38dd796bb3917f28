package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/mysqlstore"
)

// heartbeatDeadline is the liveness deadline of a heartbeat that must not
// wait for a claim (generous: the machine is loaded; the claim is held
// open for as long as the test runs).
const heartbeatDeadline = 5 * time.Second

// TestBalanceBesideOwnClaim: a claim held open before its commit (with
// every lock a slow claim holds) does not block its own relay's
// heartbeat, which renews the leases; another relay's heartbeat does not
// block either and takes none of the shards the claim works in, even once
// their lease has run out; after the claim commits it takes them, and its
// claims stay out of the shards while the first relay's events are in
// flight, which the first relay still acks.
func TestBalanceBesideOwnClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, st, table := migratedStore(t, "beat_")
	var msgs []outbox.Message
	for i := range 20 {
		msgs = append(msgs, outbox.Message{Topic: "t", Key: fmt.Sprintf("k%d", i), Type: "T", Payload: []byte(`{}`)})
	}
	if err := st.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	const leaseFor = 2 * time.Second
	a, err := st.Balance(ctx, driver.BalanceParams{Owner: "a", LeaseFor: leaseFor})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Held) != 64 {
		t.Fatalf("relay a alone holds %d shards, want 64", len(a.Held))
	}

	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	mysqlstore.SetClaimHook(st, func() {
		once.Do(func() {
			close(entered)
			<-release
		})
	})
	type result struct {
		c   driver.Claim
		err error
	}
	claimed := make(chan result, 1)
	lease := driver.Lease{Owner: "a", Epoch: 1}
	go func() {
		c, err := st.Claim(ctx, driver.ClaimParams{
			Lease:    lease,
			Limit:    100,
			LeaseFor: time.Minute,
			Shards:   a.Held,
		})
		claimed <- result{c, err}
	}()
	released := false
	defer func() {
		if !released {
			close(release)
			<-claimed
		}
	}()
	select {
	case <-entered:
	case r := <-claimed:
		t.Fatalf("the claim ended before its commit hook: %v", r.err)
	case <-time.After(time.Minute):
		t.Fatal("the claim did not reach its commit within a minute")
	}

	beat := func(owner string) (driver.Ownership, time.Duration) {
		t.Helper()
		bctx, cancel := context.WithTimeout(ctx, heartbeatDeadline)
		defer cancel()
		start := time.Now()
		own, err := st.Balance(bctx, driver.BalanceParams{Owner: owner, LeaseFor: leaseFor})
		if err != nil {
			t.Fatalf("relay %s's heartbeat beside relay a's open claim: %v (it waited for the claim's locks)", owner, err)
		}
		return own, time.Since(start)
	}
	a2, took := beat("a")
	t.Logf("relay a's heartbeat beside its own open claim took %v", took)
	if !a2.Until.After(a.Until) {
		t.Fatalf("relay a's heartbeat did not renew its leases: until %v, before %v", a2.Until, a.Until)
	}
	if fmt.Sprint(a2.Held) != fmt.Sprint(a.Held) {
		t.Fatalf("relay a's heartbeat changed what it holds: %v, before %v", a2.Held, a.Held)
	}

	// Let a's leases run out while its claim is still open: b's heartbeat
	// must neither wait nor take a shard the claim works in.
	time.Sleep(time.Until(a2.Until) + 200*time.Millisecond)
	b, took := beat("b")
	t.Logf("relay b's heartbeat beside relay a's open claim took %v", took)
	if len(b.Held) != 0 {
		t.Fatalf("relay b took %d shards from under relay a's open claim: %v", len(b.Held), b.Held)
	}

	close(release)
	released = true
	r := <-claimed
	if r.err != nil {
		t.Fatalf("relay a's claim: %v", r.err)
	}
	if len(r.c.Events) != len(msgs) {
		t.Fatalf("relay a claimed %d events, want %d", len(r.c.Events), len(msgs))
	}
	b, _ = beat("b")
	if len(b.Held) != 64 {
		t.Fatalf("relay b holds %d shards after relay a's lease ran out and its claim ended, want 64", len(b.Held))
	}
	cb, err := st.Claim(ctx, driver.ClaimParams{
		Lease:    driver.Lease{Owner: "b", Epoch: 1},
		Limit:    100,
		LeaseFor: time.Minute,
		Shards:   b.Held,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(cb.Events) != 0 {
		t.Fatalf("relay b claimed %d events still in flight under relay a's claim", len(cb.Events))
	}
	ids := make([]int64, len(r.c.Events))
	for i, e := range r.c.Events {
		ids[i] = e.ID
	}
	if err := st.Ack(ctx, driver.AckParams{Lease: lease, IDs: ids}); err != nil {
		t.Fatalf("relay a acks its claim after losing the shards: %v", err)
	}
	var left int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+table+"`").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d events left after relay a acked all of them", left)
	}
}

func migratedStore(t *testing.T, prefix string) (*sql.DB, *mysqlstore.Store, string) {
	t.Helper()
	db := openStore(t).DB()
	table := uniqueTable(prefix)
	dropTables(t, db, table)
	st, err := mysqlstore.New(db, mysqlstore.Config{Options: store.Options{Table: table}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return db, st, table
}

// TestRelayRowsOutlastLongLeases: a row that records no lease (lease_for
// is nullable; this one is written naming only owner and lease_until) is
// kept, after its membership ended, for
// twice the heartbeating relay's LeaseFor when that is longer than ten
// minutes, so the events still leased under a relay with a long lease are
// not taken for an exclusion-mode relay's (which would make every
// ownership relay refuse to claim); with a short lease, ten minutes.
func TestRelayRowsOutlastLongLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, st, table := migratedStore(t, "ret_")
	ended := func(ago time.Duration) {
		t.Helper()
		if _, err := db.ExecContext(ctx, "REPLACE INTO "+table+"_relays (owner, lease_until) VALUES ('gone', UNIX_TIMESTAMP(NOW(6)) * 1000000 - ?)", ago.Microseconds()); err != nil {
			t.Fatal(err)
		}
	}
	kept := func() bool {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+"_relays WHERE owner = 'gone'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	ended(11 * time.Minute)
	if _, err := st.Balance(ctx, driver.BalanceParams{Owner: "b", LeaseFor: 30 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if !kept() {
		t.Fatal("a heartbeat with a 30 min lease deleted the row of a relay whose membership ended 11 min ago; its claims may still be leased")
	}
	ended(61 * time.Minute)
	if _, err := st.Balance(ctx, driver.BalanceParams{Owner: "b", LeaseFor: 30 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if kept() {
		t.Fatal("a row ended 61 min ago outlived twice the 30 min lease")
	}
	ended(11 * time.Minute)
	if _, err := st.Balance(ctx, driver.BalanceParams{Owner: "b", LeaseFor: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if kept() {
		t.Fatal("with a 1 min lease, a row ended 11 min ago outlived the 10 min retention")
	}
}

// TestRelayRowsKeptByOwnLease: a relay's row outlasts its claims whatever
// the lease of the relay whose heartbeat would delete it. Relay "long"
// (30 min lease) claims events, then its membership ends (simulated: its
// lease_until is moved 11 min into the past, its claims stay leased); the
// heartbeats of relay "short" (1 min lease) keep its row, so they are not
// refused for taking the long relay's events for an exclusion relay's,
// until the row ended more than twice the long lease ago. A short-lease
// relay's row is in turn kept only its own ten minutes by a long-lease
// relay's heartbeat.
func TestRelayRowsKeptByOwnLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, st, table := migratedStore(t, "own_")
	var msgs []outbox.Message
	for i := range 8 {
		msgs = append(msgs, outbox.Message{Topic: "t", Key: fmt.Sprintf("k%d", i), Type: "T", Payload: []byte(`{}`)})
	}
	if err := st.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	const long, short = 30 * time.Minute, time.Minute
	own, err := st.Balance(ctx, driver.BalanceParams{Owner: "long", LeaseFor: long})
	if err != nil || len(own.Held) != 64 {
		t.Fatalf("relay long alone: %d shards, %v", len(own.Held), err)
	}
	c, err := st.Claim(ctx, driver.ClaimParams{
		Lease:    driver.Lease{Owner: "long", Epoch: 1},
		Limit:    100,
		LeaseFor: long,
		Shards:   own.Held,
	})
	if err != nil || len(c.Events) != len(msgs) {
		t.Fatalf("relay long's claim: %d events, %v; want %d", len(c.Events), err, len(msgs))
	}
	ended := func(owner string, ago time.Duration) {
		t.Helper()
		res, err := db.ExecContext(ctx, "UPDATE "+table+"_relays SET lease_until = UNIX_TIMESTAMP(NOW(6)) * 1000000 - ? WHERE owner = ?", ago.Microseconds(), owner)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("relay %s has no row to end", owner)
		}
	}
	kept := func(owner string) bool {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+"_relays WHERE owner = ?", owner).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	ended("long", 11*time.Minute)
	for i := range 2 {
		if _, err := st.Balance(ctx, driver.BalanceParams{Owner: "short", LeaseFor: short}); err != nil {
			t.Fatalf("relay short's heartbeat %d while relay long's claims are leased: %v", i+1, err)
		}
		if !kept("long") {
			t.Fatalf("relay short's heartbeat %d (1 min lease) deleted the row of relay long (30 min lease), whose membership ended 11 min ago and whose claims are still leased", i+1)
		}
	}
	// The other way round: relay short's row, ended 11 min ago, is kept
	// its own ten minutes, not twice the heartbeating relay's lease.
	ended("short", 11*time.Minute)
	if _, err := st.Balance(ctx, driver.BalanceParams{Owner: "other", LeaseFor: long}); err != nil {
		t.Fatal(err)
	}
	if kept("short") {
		t.Fatal("a heartbeat with a 30 min lease kept the row of relay short (1 min lease) ended 11 min ago: it outlived its 10 min retention")
	}
	if !kept("long") {
		t.Fatal("relay other's heartbeat deleted relay long's row, ended 11 min ago under a 30 min lease")
	}
	ended("long", 61*time.Minute)
	if _, err := st.Balance(ctx, driver.BalanceParams{Owner: "other", LeaseFor: short}); err != nil {
		t.Fatal(err)
	}
	if kept("long") {
		t.Fatal("relay long's row, ended 61 min ago, outlived twice its 30 min lease")
	}
}

// TestReleaseBesideOwnClaim: a relay's heartbeat releases the shards it
// was asked to give up while one of its claims over its other shards is
// open. The claim locks only the shard rows it claims from; through the
// owner index it locked all of the relay's, the release (SKIP LOCKED)
// skipped them, and with claims following each other a revoked shard
// stayed held for seconds (2 relay processes at 1,000 events/s: p99 0.7–1.9 s).
func TestReleaseBesideOwnClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, st, _ := migratedStore(t, "rel_")
	if err := st.Enqueue(ctx, outbox.Message{Topic: "t", Key: "k", Type: "T", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	a, err := st.Balance(ctx, driver.BalanceParams{Owner: "a", LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Held) != 64 {
		t.Fatalf("relay a alone holds %d shards, want 64", len(a.Held))
	}
	// relay b joins: no shard is free, so its share waits for a's release
	if b, err := st.Balance(ctx, driver.BalanceParams{Owner: "b", LeaseFor: time.Minute}); err != nil || len(b.Held) != 0 {
		t.Fatalf("relay b joining beside a: holds %d shards, err %v; want 0", len(b.Held), err)
	}
	keep, give := a.Held[:32], a.Held[32:]

	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	mysqlstore.SetClaimHook(st, func() {
		once.Do(func() {
			close(entered)
			<-release
		})
	})
	claimed := make(chan error, 1)
	go func() {
		_, err := st.Claim(ctx, driver.ClaimParams{Lease: driver.Lease{Owner: "a", Epoch: 1}, Limit: 10, LeaseFor: time.Minute, Shards: keep})
		claimed <- err
	}()
	open := true
	defer func() {
		if open {
			close(release)
			<-claimed
		}
	}()
	select {
	case <-entered:
	case err := <-claimed:
		open = false
		t.Fatalf("the claim ended before its commit hook: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the claim did not reach its commit within a minute")
	}

	var gave []int
	for _, l := range give {
		gave = append(gave, l.Shard)
	}
	bctx, cancel := context.WithTimeout(ctx, heartbeatDeadline)
	own, err := st.Balance(bctx, driver.BalanceParams{Owner: "a", LeaseFor: time.Minute, Release: gave})
	cancel()
	if err != nil {
		t.Fatalf("heartbeat releasing %d shards beside an open claim: %v", len(gave), err)
	}
	if len(own.Held) != len(keep) {
		t.Fatalf("after releasing shards %d–%d beside an open claim over the others, relay a holds %d shards; want %d (a shard the claim does not read is not the claim's)", gave[0], gave[len(gave)-1], len(own.Held), len(keep))
	}
	open = false
	close(release)
	if err := <-claimed; err != nil {
		t.Fatalf("the claim: %v", err)
	}
}

// TestRebalanceAsksForAJoinersShare: MariaDB has no notification to carry
// a joining relay's request for its share, so Rebalance tells each relay
// holding more than its share (Balance's: 64 shards over the live relays,
// one more for the first 64 mod n in byte order) that another holds less.
// Three relays join one by one and hand over by their heartbeats' releases,
// down to 22, 22 and 20, where only b (share 21) holds too much.
func TestRebalanceAsksForAJoinersShare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, st, _ := migratedStore(t, "reb_")
	held, revoked := map[string][]int{}, map[string][]int{}
	// beat runs owner's Balance, giving back the first release of the
	// shards its last Balance marked Revoke, and returns how many this
	// one marks.
	beat := func(owner string, release int) int {
		t.Helper()
		own, err := st.Balance(ctx, driver.BalanceParams{Owner: owner, LeaseFor: time.Minute, Release: revoked[owner][:release]})
		if err != nil {
			t.Fatalf("%s's heartbeat: %v", owner, err)
		}
		held[owner], revoked[owner] = nil, nil
		for _, l := range own.Held {
			held[owner] = append(held[owner], l.Shard)
			if l.Revoke {
				revoked[owner] = append(revoked[owner], l.Shard)
			}
		}
		return len(revoked[owner])
	}
	want := func(when string, asked ...string) {
		t.Helper()
		for _, o := range []string{"a", "b", "c"} {
			got, err := st.Rebalance(ctx, o)
			if err != nil {
				t.Fatalf("%s: Rebalance(%s): %v", when, o, err)
			}
			if got != slices.Contains(asked, o) {
				t.Errorf("%s (holding a %d, b %d, c %d): Rebalance(%s) = %v", when, len(held["a"]), len(held["b"]), len(held["c"]), o, got)
			}
		}
	}
	wantRevoke := func(owner string, n int) {
		t.Helper()
		if got := beat(owner, 0); got != n {
			t.Fatalf("%s's Balance after Rebalance: %d shards marked Revoke, want %d", owner, got, n)
		}
	}
	want("no relay yet")
	beat("a", 0)
	want("a alone")
	beat("b", 0)
	want("b joined", "a")
	wantRevoke("a", 32)
	beat("a", 32)
	beat("b", 0)
	want("a and b at 32 each")
	beat("c", 0)
	want("c joined", "a", "b")
	// Shares of 64 over three: 22 for a (first in byte order), 21 each
	// for b and c.
	wantRevoke("a", 10)
	wantRevoke("b", 11)
	beat("a", 10)
	beat("b", 10)
	beat("c", 0)
	if len(held["c"]) != 20 {
		t.Fatalf("c took %d shards of the 20 free", len(held["c"]))
	}
	want("a 22 (its share), b 22 (one over), c 20", "b")
	wantRevoke("b", 1)
	beat("b", 1)
	beat("c", 0)
	want("22, 21, 21")
}
