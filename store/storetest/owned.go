package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// The Owned group: ordering by ownership (driver.Driver). Each subtest balances one or more owners on a table
// of its own, claims from the shards they hold and checks the rules of
// store/owned.go: fair shares that sum to the table's shards, takeover
// after expiry with higher epochs, cooperative revoke and release, fencing
// of stale owners, shards skipped while another owner's claim touches
// them, the per-key hold rule with parking and unparking, races of
// requeue and purge against claims, keyless rows, bad rows, and (with
// Harness.ClaimReads) that a claim reads O(batch) rows behind a held key.

// ownedTests are the Owned group's subtests that apply to the harness's
// store: only those that need one shard when its tables have one (SQLite);
// it says which it leaves out, and why, in t's log. It finds out on a
// scratch table.
func (s *suite) ownedTests(t *testing.T) []struct {
	name string
	fn   func(*testing.T)
} {
	t.Helper()
	fx := s.open(t, store.Options{})
	o := fx.Store
	if err := fx.Store.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate on a fresh table: %v", err)
	}
	// The probe only finds out how many shards a table has (the group's
	// subtests check Balance itself). A heartbeat may fail on a loaded
	// database (PostgreSQL's Balance runs under a 5 s statement timeout,
	// and CI once hit it here): try again, a few times, and fail with
	// every error if it keeps failing.
	var probe driver.Ownership
	var errs []error
	for len(errs) < 5 {
		var err error
		if probe, err = o.Balance(t.Context(), driver.BalanceParams{Owner: "probe", LeaseFor: time.Minute}); err == nil {
			break
		}
		t.Logf("Balance on a fresh table, attempt %d: %v", len(errs)+1, err)
		errs = append(errs, err)
		time.Sleep(time.Duration(len(errs)) * 200 * time.Millisecond)
	}
	if len(errs) == 5 {
		t.Fatalf("Balance on a fresh table failed %d times: %v", len(errs), errors.Join(errs...))
	}
	if _, err := o.Balance(t.Context(), driver.BalanceParams{Owner: "probe", Leave: true}); err != nil {
		t.Fatalf("Balance(Leave) on a fresh table: %v", err)
	}
	all := s.allOwnedTests()
	var out []struct {
		name string
		fn   func(*testing.T)
	}
	for _, tc := range all {
		switch {
		case probe.Shards < 2 && (tc.name == "Owned/RevokeRelease" || tc.name == "Owned/SkipsShardOfAnotherLiveClaim"):
			t.Logf("%s: %s does not apply: a table has %d shard (it needs two to share)", s.h.Name, tc.name, probe.Shards)
		case tc.name == "Owned/SessionLost" && !isSessions(fx.Store):
			t.Logf("%s: %s does not apply: the store does not implement driver.Sessions (a relay's lease is the bound)", s.h.Name, tc.name)
		case s.h.ClaimReads == nil && tc.name == "Owned/ClaimReadsBounded":
			t.Logf("%s: %s does not apply: Harness.ClaimReads is not set", s.h.Name, tc.name)
		default:
			out = append(out, tc)
		}
	}
	return out
}

// allOwnedTests are the Owned group's subtests.
func (s *suite) allOwnedTests() []struct {
	name string
	fn   func(*testing.T)
} {
	return []struct {
		name string
		fn   func(*testing.T)
	}{
		{"Owned/FairShares", s.testOwnedFairShares},
		{"Owned/TakeoverAfterExpiry", s.testOwnedTakeover},
		{"Owned/TakeoverOfClaimsOverLimit", s.testOwnedTakeoverOverLimit},
		{"Owned/TakeoverBehindReleased", s.testOwnedTakeoverBehindReleased},
		{"Owned/RevokeRelease", s.testOwnedRevokeRelease},
		{"Owned/StaleClaimFenced", s.testOwnedStaleClaim},
		{"Owned/SkipsShardOfAnotherLiveClaim", s.testOwnedSkipsBusyShard},
		{"Owned/OwnInFlightDoesNotHold", s.testOwnedOwnInFlight},
		{"Owned/OwnExpiredClaimTakenBack", s.testOwnedOwnExpired},
		{"Owned/PerKey/Delayed", s.testOwnedDelayed},
		{"Owned/PerKey/Retrying", s.testOwnedRetrying},
		{"Owned/PerKey/DeadRequeue", func(t *testing.T) { s.testOwnedDead(t, "requeue") }},
		{"Owned/PerKey/DeadPurge", func(t *testing.T) { s.testOwnedDead(t, "purge") }},
		{"Owned/PerKey/DeadMoveOn", func(t *testing.T) { s.testOwnedDead(t, "move-on") }},
		{"Owned/RaceRequeuePurge", s.testOwnedRace},
		{"Owned/Keyless", s.testOwnedKeyless},
		{"Owned/OldestFirst", s.testOwnedOldestFirst},
		{"Owned/MaxBytes", s.testOwnedMaxBytes},
		{"Owned/BadRows", s.testOwnedBadRows},
		{"Owned/ConcurrentOwners", s.testOwnedConcurrent},
		{"Owned/ClaimReadsBounded", s.testOwnedReadsBounded},
		{"Owned/DeadKeyStatistics", s.testOwnedDeadKeyStatistics},
		{"Owned/SessionLost", s.testOwnedSessionLost},
	}
}

// shardLease is the Owned group's shard and membership lease where a test
// does not wait for one to expire: long, so a loaded machine's slow test
// never loses its shards midway.
const shardLease = 10 * time.Minute

// ownedFixture is a migrated table and its store's Owned ability.
func (s *suite) ownedFixture(t *testing.T) (Fixture, driver.Driver) {
	t.Helper()
	fx := s.migrated(t, store.Options{})
	return fx, fx.Store
}

func balance(t *testing.T, o driver.Driver, r driver.BalanceParams) driver.Ownership {
	t.Helper()
	own, err := o.Balance(t.Context(), r)
	if err != nil {
		t.Fatalf("Balance(%s): %v", r.Owner, err)
	}
	if len(own.Held) > own.Shards || own.Shards <= 0 {
		t.Fatalf("Balance(%s): holds %d of %d shards", r.Owner, len(own.Held), own.Shards)
	}
	for i := 1; i < len(own.Held); i++ {
		if own.Held[i].Shard <= own.Held[i-1].Shard {
			t.Fatalf("Balance(%s): Held not in shard order: %v", r.Owner, own.Held)
		}
	}
	return own
}

// claimable is what a relay claims from: the held shards not revoked.
func claimable(own driver.Ownership) []driver.ShardLease {
	var out []driver.ShardLease
	for _, l := range own.Held {
		if !l.Revoke {
			out = append(out, l)
		}
	}
	return out
}

func (s *suite) ownedReq(owner string, shards []driver.ShardLease, limit int, hold bool) driver.ClaimParams {
	return driver.ClaimParams{
		Lease:        s.lease(owner),
		Limit:        limit,
		LeaseFor:     longLease,
		HoldDeadKeys: hold,
		Shards:       shards,
	}
}

func claimOwned(t *testing.T, o driver.Driver, r driver.ClaimParams) driver.Claim {
	t.Helper()
	c, err := o.Claim(t.Context(), r)
	if err != nil {
		t.Fatalf("Claim(%s, %d shards): %v", r.Lease.Owner, len(r.Shards), err)
	}
	checkClaim(t, r, c)
	return c
}

// sole balances owner alone on the table and returns what it holds: all.
func sole(t *testing.T, o driver.Driver, owner string, hold bool) driver.Ownership {
	t.Helper()
	own := balance(t, o, driver.BalanceParams{Owner: owner, LeaseFor: shardLease, HoldDeadKeys: hold})
	if len(own.Held) != own.Shards {
		t.Fatalf("Balance of the only relay: holds %d of %d shards; want all", len(own.Held), own.Shards)
	}
	return own
}

// drainOwned claims from own's shards and acks until a claim is empty.
func (s *suite) drainOwned(t *testing.T, o driver.Driver, fx Fixture, owner string, own driver.Ownership, hold bool) []outbox.Event {
	t.Helper()
	var all []outbox.Event
	for range 1000 {
		c := claimOwned(t, o, s.ownedReq(owner, claimable(own), 1000, hold))
		if len(c.Events) == 0 {
			return all
		}
		all = append(all, c.Events...)
		ack(t, fx, c)
	}
	t.Fatalf("drainOwned: still claiming after 1000 claims")
	return nil
}

func parkedCount(t *testing.T, fx Fixture) int {
	t.Helper()
	var n int
	if err := fx.DB.QueryRowContext(t.Context(), "SELECT count(*) FROM "+fx.Table+" WHERE parked").Scan(&n); err != nil {
		t.Fatalf("counting parked rows: %v", err)
	}
	return n
}

// fair checks that the owners' holdings are disjoint, cover every shard,
// and are each floor or ceil of shards/len(owners).
func fair(t *testing.T, what string, owns map[string]driver.Ownership) {
	t.Helper()
	seen := map[int]string{}
	total := 0
	for owner, own := range owns {
		lo, hi := own.Shards/len(owns), (own.Shards+len(owns)-1)/len(owns)
		if n := len(own.Held); n < lo || n > hi {
			t.Errorf("%s: %s holds %d shards; want %d to %d of %d over %d relays", what, owner, n, lo, hi, own.Shards, len(owns))
		}
		if own.Relays != len(owns) {
			t.Errorf("%s: %s sees %d live relays; want %d", what, owner, own.Relays, len(owns))
		}
		for _, l := range own.Held {
			if prev, dup := seen[l.Shard]; dup {
				t.Errorf("%s: shard %d held by %s and %s", what, l.Shard, prev, owner)
			}
			seen[l.Shard] = owner
		}
		total = own.Shards
	}
	if len(seen) != total {
		t.Errorf("%s: %d of %d shards held", what, len(seen), total)
	}
}

// rebalance runs rounds of Balance for owners (releasing what each was
// asked to revoke, as a relay does once the shard's events are settled)
// until nobody is asked to revoke and every shard is held, and returns the
// holdings. Epochs must not go down for a shard an owner keeps.
func rebalance(t *testing.T, o driver.Driver, owners []string, lease time.Duration) map[string]driver.Ownership {
	t.Helper()
	owns := map[string]driver.Ownership{}
	release := map[string][]int{}
	for round := range 20 {
		stable := true
		held := 0
		for _, owner := range owners {
			own := balance(t, o, driver.BalanceParams{Owner: owner, LeaseFor: lease, Release: release[owner]})
			release[owner] = nil
			for _, l := range own.Held {
				if l.Revoke {
					release[owner] = append(release[owner], l.Shard)
					stable = false
				}
			}
			for _, l := range own.Held {
				for _, p := range owns[owner].Held {
					if p.Shard == l.Shard && l.Epoch < p.Epoch {
						t.Errorf("round %d: %s: shard %d epoch went down from %d to %d", round, owner, l.Shard, p.Epoch, l.Epoch)
					}
				}
			}
			owns[owner] = own
			held += len(own.Held)
		}
		if stable && round > 0 && held == owns[owners[0]].Shards {
			return owns
		}
	}
	t.Fatalf("the holdings of %v did not settle within 20 rounds of Balance: %v", owners, owns)
	return nil
}

// testOwnedFairShares: 1, 2 and 3 owners joining, then leaving, end with
// fair, disjoint shares that cover every shard; epochs grow on each change
// of hands.
func (s *suite) testOwnedFairShares(t *testing.T) {
	_, o := s.ownedFixture(t)
	epochs := map[int]int64{}
	check := func(what string, owns map[string]driver.Ownership) {
		t.Helper()
		fair(t, what, owns)
		for owner, own := range owns {
			for _, l := range own.Held {
				if l.Epoch < epochs[l.Shard] {
					t.Errorf("%s: %s holds shard %d at epoch %d, lower than the %d seen before", what, owner, l.Shard, l.Epoch, epochs[l.Shard])
				}
				epochs[l.Shard] = l.Epoch
			}
		}
	}
	check("one relay", rebalance(t, o, []string{"a"}, shardLease))
	check("b joined", rebalance(t, o, []string{"a", "b"}, shardLease))
	check("c joined", rebalance(t, o, []string{"a", "b", "c"}, shardLease))
	if own := balance(t, o, driver.BalanceParams{Owner: "b", Leave: true}); len(own.Held) != 0 {
		t.Fatalf("Balance(Leave) left b holding %v", own.Held)
	}
	check("b left", rebalance(t, o, []string{"a", "c"}, shardLease))
	balance(t, o, driver.BalanceParams{Owner: "a", Leave: true})
	check("a left", rebalance(t, o, []string{"c"}, shardLease))
}

// testOwnedTakeover: an owner that stops heartbeating loses its shards
// once its leases expire; the other owner takes them at higher epochs;
// the stale owner's claim with its old shards is refused (ErrLeaseLost),
// and its next Balance shows what it holds now.
func (s *suite) testOwnedTakeover(t *testing.T) {
	fx, o := s.ownedFixture(t)
	const short = 4 * time.Second // generous: a loaded machine may stall between two calls
	enqueue(t, fx, msg("k1", "K"), msg("n1", ""))
	a := balance(t, o, driver.BalanceParams{Owner: "a", LeaseFor: short})
	if len(a.Held) != a.Shards {
		t.Fatalf("a alone holds %d of %d shards", len(a.Held), a.Shards)
	}
	old := map[int]int64{}
	for _, l := range a.Held {
		old[l.Shard] = l.Epoch
	}
	b := balance(t, o, driver.BalanceParams{Owner: "b", LeaseFor: shardLease})
	// b.Until is the database's now at b's Balance plus its lease.
	if bNow := b.Until.Add(-shardLease); bNow.Before(a.Until) {
		if len(b.Held) != 0 {
			t.Fatalf("b took %v while a's leases were live (until %v, b's Balance at %v) and a was not asked to revoke them", b.Held, a.Until, bNow)
		}
	} else {
		t.Logf("the machine stalled past a's leases (until %v) before b's Balance (%v): the check that b takes nothing from a live owner does not apply", a.Until, bNow)
	}
	sleepUntil(a.Until.Add(200 * time.Millisecond)) // database clock; the margin covers drift between the clocks
	deadline := time.Now().Add(10 * time.Second)
	for len(b.Held) < b.Shards && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		b = balance(t, o, driver.BalanceParams{Owner: "b", LeaseFor: shardLease})
	}
	if len(b.Held) != b.Shards || b.Relays != 1 {
		t.Fatalf("after a's leases expired b holds %d of %d shards and sees %d relays; want all and 1", len(b.Held), b.Shards, b.Relays)
	}
	for _, l := range b.Held {
		if l.Epoch <= old[l.Shard] {
			t.Errorf("shard %d taken over at epoch %d; want more than a's %d", l.Shard, l.Epoch, old[l.Shard])
		}
	}
	_, err := o.Claim(t.Context(), s.ownedReq("a", a.Held, 10, true))
	if !errors.Is(err, driver.ErrLeaseLost) {
		t.Fatalf("the stale owner's claim after the takeover: %v; want ErrLeaseLost", err)
	}
	got := s.drainOwned(t, o, fx, "b", b, true)
	wantLabelSet(t, "b's claims after the takeover", got, "k1", "n1")
	a = balance(t, o, driver.BalanceParams{Owner: "a", LeaseFor: shardLease})
	for _, l := range a.Held {
		if l.Epoch <= old[l.Shard] {
			t.Errorf("a woke up holding shard %d at its old epoch %d", l.Shard, l.Epoch)
		}
	}
}

// testOwnedTakeoverOverLimit: a relay dies (SIGKILL) with more events
// in flight than the next owner's claim limit, several of each key on both
// sides of that limit, and later events of the same keys waiting behind
// them. Once its leases ran out, the next owner's claims take its events
// over, a key's lowest first, a limit at a time, and then the events that
// waited: every one comes, in each key's order, and none of these claims
// comes back empty while events are pending. (A claim that made a key's
// expired events past its limit hold the key's earlier ones too took
// nothing, forever: MariaDB's outbox stalled after a relay was killed.)
func (s *suite) testOwnedTakeoverOverLimit(t *testing.T) {
	fx, o := s.ownedFixture(t)
	const short = 4 * time.Second // generous: a loaded machine may stall between two calls
	keys := []string{"A", "B", "C"}
	var first, later []outbox.Message
	var want []string
	for i := 1; i <= 6; i++ {
		for _, k := range keys {
			m := msg(fmt.Sprintf("%s%d", strings.ToLower(k), i), k)
			if i <= 4 {
				first = append(first, m)
			} else {
				later = append(later, m)
			}
			want = append(want, m.Type)
		}
	}
	enqueue(t, fx, first...)
	a := balance(t, o, driver.BalanceParams{Owner: "a", LeaseFor: short})
	if len(a.Held) != a.Shards {
		t.Fatalf("a alone holds %d of %d shards", len(a.Held), a.Shards)
	}
	r := s.ownedReq("a", claimable(a), len(first), true)
	r.LeaseFor = short
	c := claimOwned(t, o, r)
	if len(c.Events) != len(first) {
		t.Fatalf("a's claim took %s; want all of the first %d events", fmtLabels(labels(c.Events)), len(first))
	}
	enqueue(t, fx, later...)
	// a is killed: it never settles, never heartbeats again.
	sleepUntil(maxTime(a.Until, c.Until).Add(200 * time.Millisecond))
	var b driver.Ownership
	deadline := time.Now().Add(10 * time.Second)
	for len(b.Held) < b.Shards || b.Shards == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after a's leases expired b holds %d of %d shards; want all", len(b.Held), b.Shards)
		}
		b = balance(t, o, driver.BalanceParams{Owner: "b", LeaseFor: shardLease})
		time.Sleep(50 * time.Millisecond)
	}
	const limit = 4 // less than a's claim, and than each key's events in it
	var got []outbox.Event
	for n := 1; len(got) < len(want); n++ {
		if n > 3*len(want) {
			t.Fatalf("after %d claims b has %s of %d events", n-1, fmtLabels(labels(got)), len(want))
		}
		c := claimOwned(t, o, s.ownedReq("b", claimable(b), limit, true))
		if len(c.Events) == 0 {
			t.Fatalf("claim %d of b (limit %d) took nothing with %d of %d events pending (%+v); b has %s so far",
				n, limit, len(want)-len(got), len(want), stats(t, fx), fmtLabels(labels(got)))
		}
		got = append(got, c.Events...)
		ack(t, fx, c)
	}
	for _, k := range keys {
		var w []string
		for _, l := range want {
			if strings.EqualFold(l[:1], k) {
				w = append(w, l)
			}
		}
		if g := labels(withKey(got, k)); !slices.Equal(g, w) {
			t.Errorf("key %s came as %s; want %s", k, fmtLabels(g), fmtLabels(w))
		}
	}
	if st := stats(t, fx); st.Pending() != 0 {
		t.Errorf("Stats after b's claims: %+v; want nothing pending", st)
	}
}

// testOwnedTakeoverBehindReleased: a relay gave a key's first event back
// (Release: NEW again, due at once) and died before it settled the claim
// of the key's later events. The next owner's claims, however small, take
// the key's events in order: the released one before the expired ones
// behind it. (A claim that took expired claims over before it looked at
// NEW rows sent k2 ahead of k1 once its limit was filled by them: a
// per-key order break the torture saw on SQLite.)
func (s *suite) testOwnedTakeoverBehindReleased(t *testing.T) {
	fx, o := s.ownedFixture(t)
	const short = 4 * time.Second // generous: a loaded machine may stall between two calls
	enqueue(t, fx, msg("k1", "K"), msg("k2", "K"), msg("k3", "K"))
	a := balance(t, o, driver.BalanceParams{Owner: "a", LeaseFor: short})
	if len(a.Held) != a.Shards {
		t.Fatalf("a alone holds %d of %d shards", len(a.Held), a.Shards)
	}
	c1 := claimOwned(t, o, s.ownedReq("a", claimable(a), 1, true))
	wantLabels(t, "a's first claim", c1.Events, "k1")
	r := s.ownedReq("a", claimable(a), 10, true)
	r.LeaseFor = short
	c2 := claimOwned(t, o, r)
	wantLabels(t, "a's second claim, k1 in flight", c2.Events, "k2", "k3")
	if err := o.Release(t.Context(), driver.ReleaseParams{Lease: c1.Lease, IDs: ids(c1.Events)}); err != nil {
		t.Fatalf("a releases k1: %v", err)
	}
	// a dies before it settles c2: c2 and a's shard leases run out.
	sleepUntil(maxTime(a.Until, c2.Until).Add(200 * time.Millisecond))
	var b driver.Ownership
	deadline := time.Now().Add(10 * time.Second)
	for len(b.Held) < b.Shards || b.Shards == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after a's leases expired b holds %d of %d shards; want all", len(b.Held), b.Shards)
		}
		b = balance(t, o, driver.BalanceParams{Owner: "b", LeaseFor: shardLease})
		time.Sleep(50 * time.Millisecond)
	}
	var got []outbox.Event
	for n := 1; len(got) < 3; n++ {
		if n > 10 {
			t.Fatalf("after %d claims of one event b has %s", n-1, fmtLabels(labels(got)))
		}
		c := claimOwned(t, o, s.ownedReq("b", claimable(b), 1, true))
		if len(c.Events) == 0 {
			t.Fatalf("claim %d of b took nothing with %s left (%+v)", n, fmtLabels(labels(got)), stats(t, fx))
		}
		got = append(got, c.Events...)
		ack(t, fx, c)
	}
	wantLabels(t, "b's claims of one event each", got, "k1", "k2", "k3")
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// testOwnedRevokeRelease: when b joins, a is asked to revoke the shards
// over its share; until a releases them b cannot take them; after the
// release b takes them at higher epochs.
func (s *suite) testOwnedRevokeRelease(t *testing.T) {
	_, o := s.ownedFixture(t)
	a := sole(t, o, "a", true)
	b := balance(t, o, driver.BalanceParams{Owner: "b", LeaseFor: shardLease})
	if len(b.Held) != 0 {
		t.Fatalf("b took %v before a released anything", b.Held)
	}
	a = balance(t, o, driver.BalanceParams{Owner: "a", LeaseFor: shardLease})
	var revoked []int
	epoch := map[int]int64{}
	for _, l := range a.Held {
		epoch[l.Shard] = l.Epoch
		if l.Revoke {
			revoked = append(revoked, l.Shard)
		}
	}
	if want := a.Shards / 2; len(revoked) != want {
		t.Fatalf("a, holding all %d shards beside b, was asked to revoke %d; want %d", a.Shards, len(revoked), want)
	}
	if b = balance(t, o, driver.BalanceParams{Owner: "b", LeaseFor: shardLease}); len(b.Held) != 0 {
		t.Fatalf("b took %v while a still held them (revoked, not released)", b.Held)
	}
	a = balance(t, o, driver.BalanceParams{Owner: "a", LeaseFor: shardLease, Release: revoked})
	if len(a.Held) != a.Shards-len(revoked) {
		t.Fatalf("a holds %d shards after releasing %d of %d", len(a.Held), len(revoked), a.Shards)
	}
	b = balance(t, o, driver.BalanceParams{Owner: "b", LeaseFor: shardLease})
	if len(b.Held) != len(revoked) {
		t.Fatalf("b holds %d shards after a released %d", len(b.Held), len(revoked))
	}
	for _, l := range b.Held {
		if !slices.Contains(revoked, l.Shard) {
			t.Errorf("b took shard %d, which a did not release", l.Shard)
		}
		if l.Epoch <= epoch[l.Shard] {
			t.Errorf("b took shard %d at epoch %d; want more than a's %d", l.Shard, l.Epoch, epoch[l.Shard])
		}
	}
}

// shardOfKey finds which of own's shards holds the next claimable event of
// key, by claiming each shard alone and releasing what came back.
func (s *suite) shardOfKey(t *testing.T, o driver.Driver, fx Fixture, owner string, own driver.Ownership, key string) driver.ShardLease {
	t.Helper()
	for _, l := range own.Held {
		c := claimOwned(t, o, s.ownedReq(owner, []driver.ShardLease{l}, 1000, true))
		if len(c.Events) > 0 {
			if err := fx.Store.Release(t.Context(), driver.ReleaseParams{Lease: c.Lease, IDs: ids(c.Events)}); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
		for _, ev := range c.Events {
			if ev.Key == key {
				return l
			}
		}
	}
	t.Fatalf("no shard of %v holds a claimable event of key %q", own.Held, key)
	return driver.ShardLease{}
}

// testOwnedStaleClaim: a's claim expires and its shard goes to b, whose
// claim takes the events over; a's late Ack, Retry and Extend change
// nothing (ErrLeaseLost), and b's ack stands.
func (s *suite) testOwnedStaleClaim(t *testing.T) {
	fx, o := s.ownedFixture(t)
	enqueue(t, fx, msg("k1", "K"), msg("k2", "K"))
	a := sole(t, o, "a", true)
	r := s.ownedReq("a", claimable(a), 10, true)
	r.LeaseFor = 3 * time.Second // generous: b must claim within it below
	ca := claimOwned(t, o, r)
	wantLabels(t, "a's claim", ca.Events, "k1", "k2")
	balance(t, o, driver.BalanceParams{Owner: "a", Leave: true}) // a vanishes, as if SIGSTOPped, its shards freed
	b := sole(t, o, "b", true)
	cb := claimOwned(t, o, s.ownedReq("b", claimable(b), 10, true))
	if len(cb.Events) != 0 {
		// c.Until is the database's now at the claim plus its lease.
		if at := cb.Until.Add(-longLease); at.Before(ca.Until) {
			t.Fatalf("b claimed %v at %v while a's claim of them was live (until %v)", labels(cb.Events), at, ca.Until)
		}
		t.Logf("the machine stalled past a's claim (until %v) before b's first claim: the check that b waits for it does not apply", ca.Until)
	} else {
		sleepUntil(ca.Until.Add(200 * time.Millisecond))
		cb = claimOwned(t, o, s.ownedReq("b", claimable(b), 10, true))
	}
	wantLabels(t, "b's claim after a's claim expired", cb.Events, "k1", "k2")
	if err := fx.Store.Ack(t.Context(), driver.AckParams{Lease: ca.Lease, IDs: ids(ca.Events)}); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("a's Ack after b took the events over: %v; want ErrLeaseLost", err)
	}
	if _, err := fx.Store.Extend(t.Context(), driver.ExtendParams{Lease: ca.Lease, IDs: ids(ca.Events), For: time.Minute}); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("a's Extend after the takeover: %v; want ErrLeaseLost", err)
	}
	if err := fx.Store.Retry(t.Context(), driver.RetryParams{Lease: ca.Lease, Retries: []driver.Retry{{ID: ca.Events[0].ID, Error: "late"}}}); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("a's Retry after the takeover: %v; want ErrLeaseLost", err)
	}
	ack(t, fx, cb)
	if st := stats(t, fx); st.Pending() != 0 {
		t.Errorf("Stats after b's ack: %+v; want nothing pending", st)
	}
}

// testOwnedSkipsBusyShard: a shard that a live claim of another owner
// touches (its owner released it without settling) is skipped by the new
// owner's claims until that claim is settled; other shards flow.
func (s *suite) testOwnedSkipsBusyShard(t *testing.T) {
	fx, o := s.ownedFixture(t)
	a := sole(t, o, "a", true)
	enqueue(t, fx, msg("k1", "K"))
	shard := s.shardOfKey(t, o, fx, "a", a, "K")
	ca := claimOwned(t, o, s.ownedReq("a", []driver.ShardLease{shard}, 10, true))
	wantLabels(t, "a's claim of K's shard", ca.Events, "k1")
	enqueue(t, fx, msg("k2", "K"))
	// Another key in another shard.
	other := ""
	for i := 0; other == "" && i < 1000; i++ {
		key := fmt.Sprintf("other-%d", i)
		enqueue(t, fx, msg("o-"+key, key))
		if sh := s.shardOfKey(t, o, fx, "a", a, key); sh.Shard != shard.Shard {
			other = key
		} else {
			c := claimOwned(t, o, s.ownedReq("a", []driver.ShardLease{sh}, 10, true))
			var drop []int64
			for _, ev := range c.Events {
				if ev.Key == key {
					drop = append(drop, ev.ID)
				}
			}
			if err := fx.Store.Ack(t.Context(), driver.AckParams{Lease: c.Lease, IDs: drop}); err != nil {
				t.Fatal(err)
			}
			if err := fx.Store.Release(t.Context(), driver.ReleaseParams{Lease: c.Lease, IDs: ids(withoutKey(c.Events, key))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	balance(t, o, driver.BalanceParams{Owner: "a", Leave: true})
	b := sole(t, o, "b", true)
	cb := claimOwned(t, o, s.ownedReq("b", claimable(b), 10, true))
	wantLabels(t, "b's claim while a's claim touches K's shard", cb.Events, "o-"+other)
	ack(t, fx, cb)
	ack(t, fx, ca)
	cb = claimOwned(t, o, s.ownedReq("b", claimable(b), 10, true))
	wantLabels(t, "b's claim after a's claim was acked", cb.Events, "k2")
}

func withoutKey(evs []outbox.Event, key string) []outbox.Event {
	var out []outbox.Event
	for _, ev := range evs {
		if ev.Key != key {
			out = append(out, ev)
		}
	}
	return out
}

// testOwnedOwnInFlight: an owner's own in-flight events do not hold their
// key for its next claim (it orders them itself), and never come back
// twice while in flight.
func (s *suite) testOwnedOwnInFlight(t *testing.T) {
	fx, o := s.ownedFixture(t)
	own := sole(t, o, "a", true)
	enqueue(t, fx, msg("k1", "K"), msg("k2", "K"), msg("o1", "O"))
	c1 := claimOwned(t, o, s.ownedReq("a", claimable(own), 1, true))
	wantLabels(t, "first claim", c1.Events, "k1")
	c2 := claimOwned(t, o, s.ownedReq("a", claimable(own), 10, true))
	wantLabels(t, "second claim, k1 in flight", c2.Events, "k2", "o1")
	enqueue(t, fx, msg("k3", "K"))
	c3 := claimOwned(t, o, s.ownedReq("a", claimable(own), 10, true))
	wantLabels(t, "third claim", c3.Events, "k3")
	ack(t, fx, c1)
	ack(t, fx, c3)
	ack(t, fx, c2)
	if c := claimOwned(t, o, s.ownedReq("a", claimable(own), 10, true)); len(c.Events) != 0 {
		t.Errorf("claim after all acks: %v", labels(c.Events))
	}
}

// testOwnedOwnExpired: a relay's own claim whose lease ran out (its
// settle failed, or the process stalled) no longer keeps its events from
// the relay's next claim: they come back, and nothing else is pending to
// bring the claim to look (a store that answers "nothing to take" before
// it takes expired claims over must count their rows as takeable).
func (s *suite) testOwnedOwnExpired(t *testing.T) {
	fx, o := s.ownedFixture(t)
	own := sole(t, o, "a", true)
	enqueue(t, fx, msg("k1", "K"), msg("o1", "O"))
	r := s.ownedReq("a", claimable(own), 10, true)
	r.LeaseFor = time.Second
	c1 := claimOwned(t, o, r)
	wantLabels(t, "first claim", c1.Events, "k1", "o1")
	sleepUntil(c1.Until.Add(200 * time.Millisecond))
	c2 := claimOwned(t, o, s.ownedReq("a", claimable(own), 10, true))
	wantLabels(t, "the next claim after the first one's lease ran out", c2.Events, "k1", "o1")
	ack(t, fx, c2)
	if st := stats(t, fx); st.Pending() != 0 {
		t.Errorf("Stats after the ack: %+v; want nothing pending", st)
	}
}

// testOwnedDelayed: an event delayed by AvailableAt holds its key: the
// later events are parked by the claim that meets them, the delayed one
// comes when due, and its ack unparks the others, in order.
func (s *suite) testOwnedDelayed(t *testing.T) {
	fx, o := s.ownedFixture(t)
	own := sole(t, o, "a", true)
	d := msg("k1", "K")
	d.AvailableAt = time.Now().Add(8 * time.Second) // generous: the claims below must come before it
	enqueue(t, fx, d, msg("k2", "K"), msg("o1", "O"), msg("k3", "K"))
	c := claimOwned(t, o, s.ownedReq("a", claimable(own), 10, true))
	wantLabels(t, "claim while k1 is delayed", c.Events, "o1")
	ack(t, fx, c)
	if n := parkedCount(t, fx); n != 2 {
		t.Errorf("%d rows parked after the claim met k2 and k3 behind the delayed k1; want 2", n)
	}
	enqueue(t, fx, msg("k4", "K"))
	if c := claimOwned(t, o, s.ownedReq("a", claimable(own), 10, true)); len(c.Events) != 0 {
		t.Fatalf("claim while k1 is still delayed: %v; want nothing", labels(c.Events))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c = claimOwned(t, o, s.ownedReq("a", claimable(own), 10, true))
		if len(c.Events) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	wantLabels(t, "claim once k1 is due", c.Events, "k1")
	ack(t, fx, c)
	rest := s.drainOwned(t, o, fx, "a", own, true)
	wantLabels(t, "claims after k1's ack", rest, "k2", "k3", "k4")
	if n := parkedCount(t, fx); n != 0 {
		t.Errorf("%d rows still parked after the drain", n)
	}
}

// testOwnedRetrying: k1 fails and waits for a retry; its later events,
// claimed with it, are released, then parked; they follow k1 once it is
// delivered, with no attempt counted.
func (s *suite) testOwnedRetrying(t *testing.T) {
	fx, o := s.ownedFixture(t)
	own := sole(t, o, "a", true)
	enqueue(t, fx, msg("k1", "K"), msg("k2", "K"), msg("o1", "O"), msg("k3", "K"))
	c := claimOwned(t, o, s.ownedReq("a", claimable(own), 10, true))
	wantLabels(t, "first claim", c.Events, "k1", "k2", "o1", "k3")
	ev := byLabel(c.Events)
	if err := fx.Store.Retry(t.Context(), driver.RetryParams{Lease: c.Lease, Retries: []driver.Retry{{ID: ev["k1"].ID, Delay: 8 * time.Second, Error: "broker said no"}}}); err != nil {
		t.Fatal(err)
	}
	if err := fx.Store.Release(t.Context(), driver.ReleaseParams{Lease: c.Lease, IDs: []int64{ev["k2"].ID, ev["k3"].ID}}); err != nil {
		t.Fatal(err)
	}
	if err := fx.Store.Ack(t.Context(), driver.AckParams{Lease: c.Lease, IDs: []int64{ev["o1"].ID}}); err != nil {
		t.Fatal(err)
	}
	enqueue(t, fx, msg("k4", "K"), msg("o2", "O"))
	c = claimOwned(t, o, s.ownedReq("a", claimable(own), 10, true))
	wantLabels(t, "claim while k1 waits for its retry", c.Events, "o2")
	ack(t, fx, c)
	if n := parkedCount(t, fx); n != 3 {
		t.Errorf("%d rows parked behind the retrying k1; want 3 (k2, k3, k4)", n)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c = claimOwned(t, o, s.ownedReq("a", claimable(own), 10, true))
		if len(c.Events) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	wantLabels(t, "claim once k1's retry is due", c.Events, "k1")
	if c.Events[0].Attempts != 1 {
		t.Errorf("k1 Attempts %d; want 1", c.Events[0].Attempts)
	}
	ack(t, fx, c)
	rest := s.drainOwned(t, o, fx, "a", own, true)
	wantLabels(t, "claims after k1's ack", rest, "k2", "k3", "k4")
	for _, e := range rest {
		if e.Attempts != 0 {
			t.Errorf("%s was released, not tried, yet has Attempts %d", e.Type, e.Attempts)
		}
	}
}

// testOwnedDead: a DEAD k1 holds K (HoldDeadKeys): k2 is parked; then,
// by how, k1 is requeued (k1 then k2 follow), purged (k2 follows), or the
// claims stop holding DEAD keys (k2 follows).
func (s *suite) testOwnedDead(t *testing.T, how string) {
	fx, o := s.ownedFixture(t)
	own := sole(t, o, "a", true)
	enqueue(t, fx, msg("k1", "K"), msg("o1", "O"))
	c := claimOwned(t, o, s.ownedReq("a", claimable(own), 10, true))
	wantLabels(t, "first claim", c.Events, "k1", "o1")
	ev := byLabel(c.Events)
	if err := fx.Store.Bury(t.Context(), driver.BuryParams{Lease: c.Lease, Burials: []driver.Burial{{ID: ev["k1"].ID, Error: "rejected"}}}); err != nil {
		t.Fatal(err)
	}
	ack(t, fx, driver.Claim{Lease: c.Lease, Events: []outbox.Event{ev["o1"]}})
	enqueue(t, fx, msg("k2", "K"), msg("o2", "O"))
	c = claimOwned(t, o, s.ownedReq("a", claimable(own), 10, true))
	wantLabels(t, "claim while k1 is DEAD", c.Events, "o2")
	ack(t, fx, c)
	if n := parkedCount(t, fx); n != 1 {
		t.Errorf("%d rows parked behind the DEAD k1; want 1", n)
	}
	hold := true
	want := []string{"k2"}
	switch how {
	case "requeue":
		if n, err := fx.Store.RequeueDead(t.Context(), store.DeadQuery{Key: "K"}); err != nil || n != 1 {
			t.Fatalf("RequeueDead: %d, %v", n, err)
		}
		want = []string{"k1", "k2"}
	case "purge":
		if n, err := fx.Store.Purge(t.Context(), store.PurgeRequest{Status: outbox.StatusDead, Key: "K"}); err != nil || n != 1 {
			t.Fatalf("Purge: %d, %v", n, err)
		}
	case "move-on":
		hold = false
		// Parked under HoldDeadKeys: the sweep of a Balance that does not
		// hold DEAD keys unparks it.
		own = balance(t, o, driver.BalanceParams{Owner: "a", LeaseFor: shardLease, HoldDeadKeys: false})
	}
	rest := s.drainOwned(t, o, fx, "a", own, hold)
	wantLabels(t, "claims after "+how, rest, want...)
}

// testOwnedRace: requeues and purges of a DEAD head race claims that park
// the rows behind it; whatever the interleaving, Balance's sweep and the
// claims deliver every event of the key, in order, and nothing stays
// parked.
func (s *suite) testOwnedRace(t *testing.T) {
	fx, o := s.ownedFixture(t)
	own := sole(t, o, "a", true)
	for round := range 12 {
		key := fmt.Sprintf("K%d", round)
		enqueue(t, fx, msg(key+"-head", key))
		c := claimOwned(t, o, s.ownedReq("a", claimable(own), 10, true))
		if len(c.Events) != 1 {
			t.Fatalf("round %d: claimed %v; want the head alone", round, labels(c.Events))
		}
		if err := fx.Store.Bury(t.Context(), driver.BuryParams{Lease: c.Lease, Burials: []driver.Burial{{ID: c.Events[0].ID, Error: "poison"}}}); err != nil {
			t.Fatal(err)
		}
		var want []string
		if round%2 == 0 {
			want = append(want, key+"-head") // requeued
		}
		for i := range 30 {
			want = append(want, fmt.Sprintf("%s-%02d", key, i))
		}
		var got []outbox.Event
		var mu sync.Mutex
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		shards := claimable(own)
		wg.Go(func() { // the relay: claims and acks all along
			for ctx.Err() == nil {
				c, err := o.Claim(t.Context(), s.ownedReq("a", shards, 7, true))
				if err != nil {
					t.Errorf("Claim: %v", err)
					return
				}
				mu.Lock()
				got = append(got, c.Events...)
				mu.Unlock()
				if len(c.Events) > 0 {
					if err := fx.Store.Ack(t.Context(), driver.AckParams{Lease: c.Lease, IDs: ids(c.Events)}); err != nil {
						t.Errorf("Ack: %v", err)
						return
					}
				}
			}
		})
		for i := range 30 {
			enqueue(t, fx, msg(fmt.Sprintf("%s-%02d", key, i), key))
			if i == 10+round {
				time.Sleep(time.Duration(rand.N(3000)) * time.Microsecond)
				var err error
				if round%2 == 0 {
					_, err = fx.Store.RequeueDead(t.Context(), store.DeadQuery{Key: key})
				} else {
					_, err = fx.Store.Purge(t.Context(), store.PurgeRequest{Status: outbox.StatusDead, Key: key})
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			n := len(got)
			mu.Unlock()
			if n >= len(want) || time.Now().After(deadline) {
				break
			}
			balance(t, o, driver.BalanceParams{Owner: "a", LeaseFor: shardLease, HoldDeadKeys: true})
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		wg.Wait()
		wantLabels(t, fmt.Sprintf("round %d: key %s's events", round, key), got, want...)
	}
	if n := parkedCount(t, fx); n != 0 {
		t.Errorf("%d rows parked after every round drained", n)
	}
}

// testOwnedKeyless: keyless events spread over the shards, and two owners
// with half the shards each claim them all between them, exactly once.
func (s *suite) testOwnedKeyless(t *testing.T) {
	fx, o := s.ownedFixture(t)
	owns := rebalance(t, o, []string{"a", "b"}, shardLease)
	var msgs []outbox.Message
	for i := range 200 {
		msgs = append(msgs, msg(fmt.Sprintf("n%03d", i), ""))
	}
	enqueue(t, fx, msgs...)
	var all []outbox.Event
	per := map[string]int{}
	for _, owner := range []string{"a", "b"} {
		got := s.drainOwned(t, o, fx, owner, owns[owner], true)
		per[owner] = len(got)
		all = append(all, got...)
	}
	if len(all) != 200 {
		t.Fatalf("a and b claimed %d keyless events between them; want 200", len(all))
	}
	seen := map[int64]bool{}
	for _, ev := range all {
		if seen[ev.ID] {
			t.Errorf("event %d claimed twice", ev.ID)
		}
		seen[ev.ID] = true
	}
	if owns["a"].Shards > 1 && (per["a"] == 0 || per["b"] == 0) {
		t.Errorf("keyless events per owner: %v; want both to have some (keyless rows spread over the shards)", per)
	}
}

// testOwnedOldestFirst: a claim takes the lowest ids of its shards, in id
// order, from a small backlog (a store may read every pending row at once
// and sort them) and from one many times its batch (where such a read
// must not stand for the oldest rows), and claim after claim.
func (s *suite) testOwnedOldestFirst(t *testing.T) {
	for _, n := range []int{30, 300} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			fx, o := s.ownedFixture(t)
			own := sole(t, o, "a", true)
			var msgs, want []string
			var batch []outbox.Message
			for i := range n {
				label := fmt.Sprintf("o%03d", i)
				batch = append(batch, msg(label, fmt.Sprintf("k%02d", i%40)))
				msgs = append(msgs, label)
			}
			enqueue(t, fx, batch...)
			want = msgs[:min(n, 8+8+20)]
			var got []string
			for _, limit := range []int{8, 8, 20} {
				c := claimOwned(t, o, s.ownedReq("a", claimable(own), limit, true))
				if len(c.Events) > limit {
					t.Fatalf("claim of %d took %d events", limit, len(c.Events))
				}
				got = append(got, labels(c.Events)...)
				ack(t, fx, c)
			}
			if fmtLabels(got) != fmtLabels(want) {
				t.Fatalf("claims of 8, 8 and 20 out of %d events took %s; want the lowest ids first: %s", n, fmtLabels(got), fmtLabels(want))
			}
		})
	}
}

// testOwnedBadRows: Claim buries bad rows as Claim does, and their
// keys' later events wait.
func (s *suite) testOwnedBadRows(t *testing.T) {
	fx, o := s.ownedFixture(t)
	own := sole(t, o, "a", true)
	ctx := t.Context()
	var want []string
	accepted := 0
	for i, b := range BadRows {
		good := fmt.Sprintf("good-%d", i)
		enqueue(t, fx, msg(good, good))
		want = append(want, good)
		refused := b.Insert(ctx, fx.DB, fx.Table, fx.Placeholder, []byte(`{}`)) != nil
		if !refused {
			accepted++
		}
		if !strings.ContainsRune(b.Key(), 0x1b) {
			enqueue(t, fx, msg("later-"+b.Name, b.Key()))
			if refused {
				want = append(want, "later-"+b.Name)
			}
		}
	}
	enqueue(t, fx, msg("last", ""))
	want = append(want, "last")
	c := claimOwned(t, o, s.ownedReq("a", claimable(own), 1000, true))
	wantLabels(t, "one owned claim over every kind of bad row", c.Events, want...)
	ack(t, fx, c)
	if again := s.drainOwned(t, o, fx, "a", own, true); len(again) != 0 {
		t.Errorf("after the bad rows were buried, claims returned %v; want nothing", labels(again))
	}
	if st := stats(t, fx); st.Dead != int64(accepted) {
		t.Errorf("Stats after one owned claim over %d accepted bad rows: %+v; want Dead %d", accepted, st, accepted)
	}
}

// testOwnedConcurrent: three owners balance and claim at once while
// keyed events are enqueued; one joins late and one leaves midway (after
// settling its work). Every event is claimed exactly once, and a key's
// events are claimed in id order, each after the previous one was acked
// by whichever owner held it.
func (s *suite) testOwnedConcurrent(t *testing.T) {
	fx, o := s.ownedFixture(t)
	const total, keys = 3000, 40
	var msgs []outbox.Message
	for i := range total {
		msgs = append(msgs, outbox.Message{Topic: "load", Key: fmt.Sprintf("key-%02d", i%keys), Type: fmt.Sprintf("e%05d", i), Payload: []byte("{}")})
	}
	var mu sync.Mutex
	last := map[string]int64{} // key → highest id acked
	seen := map[int64]bool{}
	var problems []string
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= total
	}
	relay := func(owner string, startAfter, stopAfter time.Duration) {
		defer wg.Done()
		time.Sleep(startAfter)
		start := time.Now()
		var release []int
		for ctx.Err() == nil && !done() {
			leave := stopAfter > 0 && time.Since(start) > stopAfter
			own, err := o.Balance(ctx, driver.BalanceParams{Owner: owner, LeaseFor: 5 * time.Second, Release: release, Leave: leave, HoldDeadKeys: true})
			if err != nil {
				t.Errorf("%s: Balance: %v", owner, err)
				return
			}
			if leave {
				return
			}
			release = nil
			for _, l := range own.Held {
				if l.Revoke {
					release = append(release, l.Shard) // nothing in flight between rounds
				}
			}
			for range 5 {
				c, err := o.Claim(ctx, s.ownedReq(owner, claimable(own), 50, true))
				if errors.Is(err, driver.ErrLeaseLost) {
					break
				}
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("%s: Claim: %v", owner, err)
					}
					return
				}
				if len(c.Events) == 0 {
					time.Sleep(5 * time.Millisecond)
					break
				}
				mu.Lock()
				for _, ev := range c.Events {
					if seen[ev.ID] {
						problems = append(problems, fmt.Sprintf("event %d claimed twice", ev.ID))
					}
					seen[ev.ID] = true
					if ev.ID <= last[ev.Key] {
						problems = append(problems, fmt.Sprintf("key %s: event %d claimed by %s after event %d", ev.Key, ev.ID, owner, last[ev.Key]))
					}
					last[ev.Key] = ev.ID
				}
				mu.Unlock()
				if err := fx.Store.Ack(ctx, driver.AckParams{Lease: c.Lease, IDs: ids(c.Events)}); err != nil {
					t.Errorf("%s: Ack: %v", owner, err)
					return
				}
			}
		}
	}
	wg.Add(3)
	go relay("r1", 0, 0)
	go relay("r2", 0, 400*time.Millisecond)
	go relay("r3", 200*time.Millisecond, 0)
	for i := 0; i < total; i += 100 {
		enqueue(t, fx, msgs[i:i+100]...)
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	for i, p := range problems {
		if i == 20 {
			break
		}
		t.Error(p)
	}
	if len(seen) != total {
		t.Fatalf("%d of %d events claimed", len(seen), total)
	}
}

// testOwnedReadsBounded: behind a DEAD event of one key wait 100,000 more;
// every claim reads a bounded number of rows (its batch and the rows it
// parks), not the backlog, and once they are parked a claim for other
// keys reads about what it claims.
func (s *suite) testOwnedReadsBounded(t *testing.T) {
	fx, o := s.ownedFixture(t)
	own := sole(t, o, "a", true)
	enqueue(t, fx, msg("head", "HOT"))
	c := claimOwned(t, o, s.ownedReq("a", claimable(own), 10, true))
	if err := fx.Store.Bury(t.Context(), driver.BuryParams{Lease: c.Lease, Burials: []driver.Burial{{ID: c.Events[0].ID, Error: "poison"}}}); err != nil {
		t.Fatal(err)
	}
	const held, limit = 100_000, 1000
	batch := make([]outbox.Message, 5000)
	for i := range batch {
		batch[i] = msg("hot", "HOT")
	}
	for range held / len(batch) {
		enqueue(t, fx, batch...)
	}
	bound := int64(5*limit + 200)
	var worst int64
	for i := 0; ; i++ {
		own = balance(t, o, driver.BalanceParams{Owner: "a", LeaseFor: shardLease, HoldDeadKeys: true}) // as a relay renews
		c, reads, err := s.h.ClaimReads(t.Context(), fx.Store, s.ownedReq("a", claimable(own), limit, true))
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		if len(c.Events) != 0 {
			t.Fatalf("claim %d returned %d events of the held key", i, len(c.Events))
		}
		worst = max(worst, reads)
		if reads > bound {
			t.Fatalf("claim %d behind %d held rows read %d rows; want at most %d", i, held, reads, bound)
		}
		if reads < 10 || i > held/limit+5 {
			break
		}
	}
	if n := parkedCount(t, fx); n != held {
		t.Fatalf("%d rows parked; want %d", n, held)
	}
	var others []outbox.Message
	for i := range 50 {
		others = append(others, msg(fmt.Sprintf("o%02d", i), fmt.Sprintf("other-%d", i)))
	}
	enqueue(t, fx, others...)
	own = balance(t, o, driver.BalanceParams{Owner: "a", LeaseFor: shardLease, HoldDeadKeys: true})
	c, reads, err := s.h.ClaimReads(t.Context(), fx.Store, s.ownedReq("a", claimable(own), limit, true))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Events) != 50 {
		t.Fatalf("claim of the other keys returned %d events; want 50", len(c.Events))
	}
	if reads > 10*50+100 {
		t.Errorf("claim of 50 events beside %d parked rows read %d rows; want about 50 per probe", held, reads)
	}
	t.Logf("%s: parking claims read at most %d rows each (limit %d); the claim of 50 events beside %d parked rows read %d", s.h.Name, worst, limit, held, reads)
	ack(t, fx, c)
}
