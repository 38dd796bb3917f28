package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// Fixture is one store over a fresh, not-yet-migrated table.
type Fixture struct {
	Store driver.Store
	// DB is the same database, for raw SQL and the caller's transactions
	// (store.EnqueueTx takes a *sql.Tx).
	DB *sql.DB
	// Table is the quoted, qualified table name for raw SQL, e.g.
	// "public"."st_ab12" or `st_ab12`.
	Table string
	// Placeholder returns the n-th bind parameter, 1-based: Dollar ("$1")
	// for PostgreSQL, Question ("?") for MySQL and SQLite.
	Placeholder func(n int) string
}

// Harness is what a store gives the suite.
type Harness struct {
	// Name is "postgres", "mysql" or "sqlite": printed in test names and logs.
	Name string
	// Open returns a store for opts (opts.Table is a unique name chosen by
	// the suite). It must register t.Cleanup to drop the table, its
	// archive (Table+"_archive"), bookkeeping (Table+"_migrations", and
	// Table+"_claims", Table+"_shards" and Table+"_relays" where the store
	// keeps them), and
	// to close the store. It must NOT migrate. Required.
	Open func(t *testing.T, opts store.Options) Fixture
	// New constructs a store over the same database without creating
	// anything: the suite uses it to check that invalid names are refused
	// (by New itself or by Migrate) and to migrate one table from several
	// stores at once. The suite closes what New returns. Required.
	New func(opts store.Options) (driver.Store, error)
	// SingleWriter says the database runs one writing transaction at a
	// time (SQLite). The suite then skips the checks that hold two writing
	// transactions open at once or claim beside an open one.
	SingleWriter bool
	// ClaimedStatus is what the status column of a claimed row holds:
	// "" means SENDING, the row's own state. A store that records claims
	// per batch in a table of its own (PostgreSQL) leaves the row NEW and
	// reports SENDING through Get and Stats; the suite checks both.
	ClaimedStatus outbox.Status
	// ClaimReads, for a store that implements driver.Driver, runs one
	// Claim on st and reports how many rows of the outbox table it
	// read (pgstore: EXPLAIN ANALYZE of its claim statement). The Owned
	// group then checks that a claim reads O(batch) rows behind a held
	// key with 100,000 rows; nil skips that check.
	ClaimReads func(ctx context.Context, st driver.Store, req driver.ClaimParams) (driver.Claim, int64, error)
	// Loosen, for a database that refuses some values of the table
	// contract at INSERT by rules a table migrated before them lacks
	// (PostgreSQL's domain constraints), drops those rules on fx's
	// table: the Hostile case then inserts a refused value again, as
	// such a table may hold it, and checks that the store survives it.
	// nil: the refusal is the end of that value's case.
	Loosen func(t *testing.T, fx Fixture)
}

// Dollar is the PostgreSQL placeholder: $1, $2, …
func Dollar(n int) string { return "$" + strconv.Itoa(n) }

// Question is the MySQL and SQLite placeholder: ?
func Question(int) string { return "?" }

// Run runs the conformance suite against h. It returns after all subtests,
// which run in parallel on tables of their own, have finished.
func Run(t *testing.T, h Harness) {
	t.Helper()
	switch {
	case h.Name == "":
		t.Fatal("storetest: Harness.Name is empty; set it to the database's name, e.g. \"postgres\"")
	case h.Open == nil:
		t.Fatal("storetest: Harness.Open is nil; it must return a store over a fresh, unmigrated table")
	case h.New == nil:
		t.Fatal("storetest: Harness.New is nil; it must construct a store over the same database without creating anything")
	}
	t.Logf("store conformance suite: %s", h.Name)
	s := &suite{h: h}
	tests := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"Migrate/Idempotent", s.testMigrateIdempotent},
		{"Migrate/Concurrent", s.testMigrateConcurrent},
		{"Migrate/InvalidNames", s.testInvalidNames},
		{"Migrate/NotMigrated", s.testNotMigrated},
		{"TableContract", s.testTableContract},
		{"BadRows", s.testBadRows},
		{"BadRowsInOneClaim", s.testBadRowsInOneClaim},
		{"BadRowBesideHeldKey", s.testBadRowBesideHeldKey},
		{"EnqueueTx/Commit", s.testEnqueueTxCommit},
		{"EnqueueTx/Rollback", s.testEnqueueTxRollback},
		{"EnqueueTx/ValidationKeepsTxUsable", s.testEnqueueTxValidation},
		{"EnqueueTx/Execers", s.testEnqueueTxExecers},
		{"OutOfOrderCommit/Keyless", func(t *testing.T) { s.testOutOfOrderCommit(t, "", "") }},
		{"OutOfOrderCommit/Keyed", func(t *testing.T) { s.testOutOfOrderCommit(t, "order-a", "order-b") }},
		{"Batch", s.testBatch},
		{"PerKey/RetryDelayHolds", s.testPerKeyRetryHolds},
		{"PerKey/RetryNowKeepsOrder", s.testPerKeyRetryNow},
		{"PerKey/DeadHolds", s.testPerKeyDead},
		{"PerKey/AvailableAtHolds", s.testPerKeyAvailableAt},
		{"Lease/Expiry", s.testLeaseExpiry},
		{"Lease/SameOwnerNewEpoch", s.testLeaseFencingEpoch},
		{"Lease/Extend", s.testLeaseExtend},
		{"Lease/Release", s.testLeaseRelease},
		{"Lease/PartialAck", s.testLeasePartialAck},
		{"Lease/SendingWithoutLease", s.testSendingWithoutLease},
		{"Retry", s.testRetry},
		{"Dead/Bury", s.testBury},
		{"Dead/ListAndRequeue", s.testListRequeueDead},
		{"Dead/Purge", s.testPurgeDead},
		{"KeepSent", s.testKeepSent},
		{"DeleteOnAck", s.testDeleteOnAck},
		{"Stats", s.testStats},
		{"Backlog", s.testBacklog},
		{"Backlog/Due", s.testBacklogDue},
		{"Backlog/DeadCap", s.testBacklogDeadCap},
		{"Payloads", s.testPayloads},
		{"PayloadTooLarge", s.testPayloadTooLarge},
		{"MaxPayloadOption", s.testMaxPayloadOption},
		{"Fields", s.testFields},
		{"Notifier", s.testNotifier},
		{"ClaimAcker", s.testClaimAcker},
	}
	// The Owned group runs for stores that implement driver.Driver.
	tests = append(tests, s.ownedTests(t)...)
	tests = append(tests, struct {
		name string
		fn   func(*testing.T)
	}{"Hostile", s.testHostile})
	// Alone, before the parallel subtests: it measures allocations.
	t.Run(h.Name+"/PreviewCost", s.testPreviewCost)
	// The group makes Run wait for its parallel subtests, so a caller's
	// deferred db.Close runs after them.
	t.Run(h.Name, func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.fn(t)
			})
		}
	})
}

type suite struct {
	h     Harness
	epoch atomic.Int64
}

const longLease = time.Minute

// lease returns a fresh lease for owner: epochs increase across the suite.
func (s *suite) lease(owner string) driver.Lease {
	return driver.Lease{Owner: owner, Epoch: s.epoch.Add(1)}
}

// newTableName returns a unique valid table name such as st_0a1b2c3d4e.
func newTableName() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "st_" + hex.EncodeToString(b[:])
}

// open returns a fixture over a fresh table, not migrated.
func (s *suite) open(t *testing.T, opts store.Options) Fixture {
	t.Helper()
	if opts.Table == "" {
		opts.Table = newTableName()
	}
	fx := s.h.Open(t, opts)
	switch {
	case fx.Store == nil:
		t.Fatalf("%s harness: Open returned a Fixture without a Store", s.h.Name)
	case fx.DB == nil:
		t.Fatalf("%s harness: Open returned a Fixture without a DB", s.h.Name)
	case fx.Table == "":
		t.Fatalf("%s harness: Open returned a Fixture without a Table", s.h.Name)
	case fx.Placeholder == nil:
		t.Fatalf("%s harness: Open returned a Fixture without a Placeholder", s.h.Name)
	}
	return fx
}

// migrated returns a fixture over a fresh, migrated table.
func (s *suite) migrated(t *testing.T, opts store.Options) Fixture {
	t.Helper()
	fx := s.open(t, opts)
	if err := fx.Store.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate on a fresh table: %v", err)
	}
	return fx
}

// msg is a small message whose Type is its label, so tests can name events.
func msg(label, key string) outbox.Message {
	return outbox.Message{Topic: "orders", Key: key, Type: label, Payload: []byte(`{"label":"` + label + `"}`)}
}

func enqueue(t *testing.T, fx Fixture, msgs ...outbox.Message) {
	t.Helper()
	if err := fx.Store.Enqueue(t.Context(), msgs...); err != nil {
		t.Fatalf("Enqueue(%d messages): %v", len(msgs), err)
	}
}

func req(l driver.Lease, limit int) driver.ClaimParams {
	return driver.ClaimParams{Lease: l, Limit: limit, LeaseFor: longLease, HoldDeadKeys: true}
}

// claim claims as a relay that is alone on the table for the length of
// one claim (tryClaim), and checks what every claim must satisfy.
func claim(t *testing.T, fx Fixture, r driver.ClaimParams) driver.Claim {
	t.Helper()
	c, err := tryClaim(t.Context(), fx.Store, r)
	if err != nil {
		t.Fatalf("claim(owner %q, limit %d): %v", r.Lease.Owner, r.Limit, err)
	}
	checkClaim(t, r, c)
	return c
}

// tryClaim is one claim by r.Lease.Owner as a relay that joins the table,
// claims from every shard it can take, and leaves again: Balance, Claim
// from the shards held, Balance(Leave). Its claim stays live after it left,
// so the shards it touched stay closed to the next owner's claims until
// that claim is settled or its lease runs out (the ownership rule), while
// the owner's own later claims are not held by it.
func tryClaim(ctx context.Context, st driver.Store, r driver.ClaimParams) (driver.Claim, error) {
	own, err := st.Balance(ctx, driver.BalanceParams{Owner: r.Lease.Owner, LeaseFor: shardLease, HoldDeadKeys: r.HoldDeadKeys})
	if err != nil {
		return driver.Claim{}, fmt.Errorf("balance: %w", err)
	}
	r.Shards = claimable(own)
	c, err := st.Claim(ctx, r)
	if err != nil {
		return driver.Claim{}, fmt.Errorf("claim: %w", err)
	}
	if _, err := st.Balance(ctx, driver.BalanceParams{Owner: r.Lease.Owner, Leave: true}); err != nil {
		return driver.Claim{}, fmt.Errorf("balance (leave): %w", err)
	}
	return c, nil
}

// checkClaim reports (without stopping) a claim that breaks the contract;
// it is safe to call from goroutines.
func checkClaim(t *testing.T, r driver.ClaimParams, c driver.Claim) bool {
	t.Helper()
	ok := true
	if limit := r.WithDefaults().Limit; len(c.Events) > limit {
		t.Errorf("Claim(limit %d) returned %d events", limit, len(c.Events))
		ok = false
	}
	if len(c.Events) > 1 && r.MaxBytes > 0 {
		var sum int64
		for _, ev := range c.Events {
			sum += int64(len(ev.Payload))
		}
		if sum > r.MaxBytes {
			t.Errorf("Claim(MaxBytes %d) returned %d events of %d payload bytes; only a claim of one event may pass the bound", r.MaxBytes, len(c.Events), sum)
			ok = false
		}
	}
	for i := 1; i < len(c.Events); i++ {
		if c.Events[i].ID <= c.Events[i-1].ID {
			t.Errorf("Claim returned events out of id order: id %d after id %d; a claim must be in id order", c.Events[i].ID, c.Events[i-1].ID)
			ok = false
		}
	}
	if len(c.Events) > 0 {
		if c.Lease.Owner != r.Lease.Owner {
			t.Errorf("Claim(owner %q) returned lease owner %q; the claim's Lease must name the requesting owner", r.Lease.Owner, c.Lease.Owner)
			ok = false
		}
		if c.Until.IsZero() {
			t.Errorf("Claim returned %d events with a zero Until; it must report the lease expiry", len(c.Events))
			ok = false
		}
	}
	for _, ev := range c.Events {
		if ev.EventID == "" {
			t.Errorf("Claim returned event id %d with an empty EventID", ev.ID)
			ok = false
		}
	}
	return ok
}

func ack(t *testing.T, fx Fixture, c driver.Claim) {
	t.Helper()
	if len(c.Events) == 0 {
		return
	}
	if err := fx.Store.Ack(t.Context(), driver.AckParams{Lease: c.Lease, IDs: ids(c.Events)}); err != nil {
		t.Fatalf("Ack of %d events just claimed by %+v: %v", len(c.Events), c.Lease, err)
	}
}

func get(t *testing.T, fx Fixture, id int64) store.Record {
	t.Helper()
	r, err := fx.Store.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get(%d): %v", id, err)
	}
	if r.ID != id {
		t.Fatalf("Get(%d) returned the record of id %d", id, r.ID)
	}
	return r
}

func stats(t *testing.T, fx Fixture) store.Stats {
	t.Helper()
	st, err := fx.Store.Stats(t.Context())
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

// wantNotFound checks that id is gone.
func wantNotFound(t *testing.T, fx Fixture, id int64, why string) {
	t.Helper()
	r, err := fx.Store.Get(t.Context(), id)
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(%d) %s: got record %+v, err %v; want an error matching store.ErrNotFound", id, why, r.Status, err)
	}
}

// drain claims (owner, hold) and acks until a claim comes back empty, and
// returns every event in claim order.
func (s *suite) drain(t *testing.T, fx Fixture, owner string, hold bool) []outbox.Event {
	t.Helper()
	var all []outbox.Event
	for range 1000 {
		r := req(s.lease(owner), 1000)
		r.HoldDeadKeys = hold
		c := claim(t, fx, r)
		if len(c.Events) == 0 {
			return all
		}
		all = append(all, c.Events...)
		ack(t, fx, c)
	}
	t.Fatalf("drain: still claiming events after 1000 claims")
	return nil
}

// buryAll claims and buries until n events are DEAD; it returns them.
func (s *suite) buryAll(t *testing.T, fx Fixture, n int, reason func(outbox.Event) string) []outbox.Event {
	t.Helper()
	var all []outbox.Event
	for len(all) < n {
		r := req(s.lease("undertaker"), n-len(all))
		r.HoldDeadKeys = false
		c := claim(t, fx, r)
		if len(c.Events) == 0 {
			t.Fatalf("buryAll: only %d of %d events could be claimed", len(all), n)
		}
		var bs []driver.Burial
		for _, ev := range c.Events {
			bs = append(bs, driver.Burial{ID: ev.ID, Error: reason(ev)})
		}
		if err := fx.Store.Bury(t.Context(), driver.BuryParams{Lease: c.Lease, Burials: bs}); err != nil {
			t.Fatalf("Bury of %d events just claimed: %v", len(bs), err)
		}
		all = append(all, c.Events...)
	}
	return all
}

func ids(evs []outbox.Event) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

// labels returns the events' Type fields (the tests' names for events).
func labels(evs []outbox.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

func byLabel(evs []outbox.Event) map[string]outbox.Event {
	m := make(map[string]outbox.Event, len(evs))
	for _, ev := range evs {
		m[ev.Type] = ev
	}
	return m
}

func withKey(evs []outbox.Event, key string) []outbox.Event {
	var out []outbox.Event
	for _, ev := range evs {
		if ev.Key == key {
			out = append(out, ev)
		}
	}
	return out
}

// wantLabels compares a claim's events, in order, with the expected labels.
func wantLabels(t *testing.T, what string, evs []outbox.Event, want ...string) {
	t.Helper()
	got := labels(evs)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got events %s, want %s", what, fmtLabels(got), fmtLabels(want))
	}
}

// wantLabelSet compares ignoring order.
func wantLabelSet(t *testing.T, what string, evs []outbox.Event, want ...string) {
	t.Helper()
	got := slices.Sorted(slices.Values(labels(evs)))
	w := slices.Sorted(slices.Values(want))
	if !slices.Equal(got, w) {
		t.Fatalf("%s: got events %s, want %s (in any order)", what, fmtLabels(got), fmtLabels(w))
	}
}

func fmtLabels(l []string) string {
	if len(l) == 0 {
		return "[] (none)"
	}
	return "[" + strings.Join(l, " ") + "]"
}

// near reports whether got is within tol of want.
func near(got, want time.Time, tol time.Duration) bool {
	d := got.Sub(want)
	return d >= -tol && d <= tol
}

// within reports whether got lies in [lo-tol, hi+tol].
func within(got, lo, hi time.Time, tol time.Duration) bool {
	return !got.Before(lo.Add(-tol)) && !got.After(hi.Add(tol))
}

// sleepUntil sleeps until local time reaches at.
func sleepUntil(at time.Time) {
	if d := time.Until(at); d > 0 {
		time.Sleep(d)
	}
}

// eventually claims with fresh leases of owner every 50ms until a claim
// returns events or timeout passes.
func (s *suite) eventually(t *testing.T, fx Fixture, owner string, limit int, timeout time.Duration) driver.Claim {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c := claim(t, fx, req(s.lease(owner), limit))
		if len(c.Events) > 0 {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("no event became claimable for %q within %v", owner, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func describe(r store.Record) string {
	return fmt.Sprintf("{status %s, owner %q, lease until %v, attempts %d, last error %q}", r.Status, r.LeaseOwner, r.LeaseUntil, r.Attempts, r.LastError)
}
