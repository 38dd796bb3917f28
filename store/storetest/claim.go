package storetest

import (
	"errors"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// testPerKeyRetryHolds: an earlier event waiting for its retry holds its key.
func (s *suite) testPerKeyRetryHolds(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	enqueue(t, fx, msg("k1", "K"), msg("k2", "K"), msg("o1", "other-1"), msg("k3", "K"))
	a := claim(t, fx, req(s.lease("relay-a"), 1))
	wantLabels(t, "Claim(Limit 1)", a.Events, "k1")
	if err := fx.Store.Retry(t.Context(), driver.RetryParams{Lease: a.Lease, Retries: []driver.Retry{{ID: a.Events[0].ID, Delay: time.Hour, Error: "broker down"}}}); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	b := claim(t, fx, req(s.lease("relay-b"), 10))
	wantLabels(t, "claim while k1 waits an hour for its retry (k2 and k3 must wait behind it)", b.Events, "o1")
	ack(t, fx, b)
	enqueue(t, fx, msg("o2", "other-2"), msg("k4", "K"), msg("n1", ""))
	c := claim(t, fx, req(s.lease("relay-c"), 10))
	wantLabels(t, "claim of later events while k1 waits for its retry", c.Events, "o2", "n1")
	ack(t, fx, c)
	if st := stats(t, fx); st.Retrying != 1 || st.New != 4 {
		t.Errorf("Stats with k1 retrying and k2..k4 waiting: %+v; want Retrying 1, New 4", st)
	}
}

// testPerKeyRetryNow: a retry without delay makes the event claimable at
// once, and the key's events still come in id order.
func (s *suite) testPerKeyRetryNow(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	enqueue(t, fx, msg("k1", "K"), msg("k2", "K"), msg("o1", "other-1"), msg("k3", "K"))
	a := claim(t, fx, req(s.lease("relay-a"), 1))
	wantLabels(t, "Claim(Limit 1)", a.Events, "k1")
	if err := fx.Store.Retry(t.Context(), driver.RetryParams{Lease: a.Lease, Retries: []driver.Retry{{ID: a.Events[0].ID, Delay: 0, Error: "flaky"}}}); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	all := s.drain(t, fx, "relay-b", true)
	k := withKey(all, "K")
	wantLabels(t, "key K's events after k1's immediate retry", k, "k1", "k2", "k3")
	wantLabelSet(t, "all events after k1's immediate retry", all, "k1", "k2", "k3", "o1")
	if k[0].Attempts != 1 {
		t.Errorf("k1 claimed again with Attempts %d; want 1 after one Retry", k[0].Attempts)
	}
	if k[1].Attempts != 0 {
		t.Errorf("k2 claimed with Attempts %d; want 0", k[1].Attempts)
	}
}

// testPerKeyDead: with HoldDeadKeys a DEAD event holds its key's later
// events; without, they move on; requeueing frees the key.
func (s *suite) testPerKeyDead(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	enqueue(t, fx, msg("k1", "K"), msg("k2", "K"), msg("k3", "K"), msg("o1", "other-1"), msg("n1", ""))
	a := claim(t, fx, req(s.lease("relay-a"), 1))
	wantLabels(t, "Claim(Limit 1)", a.Events, "k1")
	if err := fx.Store.Bury(t.Context(), driver.BuryParams{Lease: a.Lease, Burials: []driver.Burial{{ID: a.Events[0].ID, Error: "poison"}}}); err != nil {
		t.Fatalf("Bury: %v", err)
	}
	held := s.drain(t, fx, "relay-hold", true)
	wantLabelSet(t, "claims with HoldDeadKeys=true after k1 was buried (k2, k3 must wait; other keys flow)", held, "o1", "n1")
	if st := stats(t, fx); st.BlockedKeys != 1 || st.Dead != 1 || st.New != 2 {
		t.Errorf("Stats with key K held by dead k1: %+v; want BlockedKeys 1, Dead 1, New 2", st)
	}
	moved := s.drain(t, fx, "relay-move-on", false)
	wantLabels(t, "claims with HoldDeadKeys=false after k1 was buried", moved, "k2", "k3")
	n, err := fx.Store.RequeueDead(t.Context(), store.DeadQuery{Key: "K"})
	if err != nil || n != 1 {
		t.Fatalf("RequeueDead(key K) = %d, %v; want 1, nil", n, err)
	}
	again := s.drain(t, fx, "relay-after-requeue", true)
	wantLabels(t, "claims after k1 was requeued", again, "k1")
}

// testPerKeyAvailableAt: a keyed event delayed by AvailableAt holds its
// key; a delayed keyless event holds nothing.
func (s *suite) testPerKeyAvailableAt(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	soon := time.Now().Add(5 * time.Second) // past the claims below, however slow
	k1 := msg("k1", "K")
	k1.AvailableAt = soon
	later := msg("later", "")
	later.AvailableAt = time.Now().Add(time.Hour)
	enqueue(t, fx, k1, msg("k2", "K"), later, msg("o1", "other-1"), msg("k3", "K"), msg("n1", ""))
	c := claim(t, fx, req(s.lease("relay-a"), 10))
	wantLabels(t, "claim while k1 is delayed by AvailableAt (k2, k3 must wait; a delayed keyless event holds nothing)", c.Events, "o1", "n1")
	ack(t, fx, c)
	if st := stats(t, fx); st.New != 4 {
		t.Errorf("Stats with 4 delayed or waiting events: %+v; want New 4 (New includes delayed events)", st)
	}
	sleepUntil(soon.Add(300 * time.Millisecond))
	all := s.drain(t, fx, "relay-b", true)
	wantLabels(t, "claims after k1's AvailableAt passed", all, "k1", "k2", "k3")
}

// testClaimAcker: AckClaim acks a whole claim, and is fenced like Ack.
func (s *suite) testClaimAcker(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	ca, ok := fx.Store.(driver.Driver)
	if !ok {
		t.Skipf("%s store does not implement driver.Driver", s.h.Name)
	}
	ctx := t.Context()
	enqueue(t, fx, msg("a1", "A"), msg("k1", ""), msg("a2", "A"))
	c := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "claim", c.Events, "a1", "k1", "a2")
	enqueue(t, fx, msg("a3", "A"))
	if err := ca.AckClaim(ctx, driver.AckClaimParams{Lease: c.Lease, N: len(c.Events)}); err != nil {
		t.Fatalf("AckClaim: %v", err)
	}
	for _, e := range c.Events {
		wantNotFound(t, fx, e.ID, "after AckClaim")
	}
	if err := ca.AckClaim(ctx, driver.AckClaimParams{Lease: c.Lease, N: len(c.Events)}); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("AckClaim a second time: %v; want driver.ErrLeaseLost", err)
	}
	// The key is free again: a3 is claimable at once.
	next := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "claim after AckClaim", next.Events, "a3")

	// A stale owner's AckClaim after a takeover changes nothing.
	r := req(s.lease("stale"), 10)
	r.LeaseFor = time.Second
	if err := fx.Store.Release(ctx, driver.ReleaseParams{Lease: next.Lease, IDs: ids(next.Events)}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	old := claim(t, fx, r)
	wantLabels(t, "claim with a 1s lease", old.Events, "a3")
	fresh := s.eventually(t, fx, "fresh", 10, 5*time.Second)
	wantLabels(t, "claim after the lease ran out", fresh.Events, "a3")
	if err := ca.AckClaim(ctx, driver.AckClaimParams{Lease: old.Lease, N: 1}); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("AckClaim by the stale owner: %v; want driver.ErrLeaseLost", err)
	}
	if rec := get(t, fx, fresh.Events[0].ID); rec.Status != outbox.StatusSending || rec.LeaseOwner != "fresh" {
		t.Errorf("after a stale AckClaim: %s; want SENDING under owner fresh", describe(rec))
	}

	// With KeepSent the claim's events move to the archive as SENT.
	kept := s.migrated(t, store.Options{KeepSent: true})
	enqueue(t, kept, msg("s1", "S"), msg("s2", ""))
	kc := claim(t, kept, req(s.lease("relay"), 10))
	if err := kept.Store.(driver.Driver).AckClaim(ctx, driver.AckClaimParams{Lease: kc.Lease, N: len(kc.Events)}); err != nil {
		t.Fatalf("AckClaim with KeepSent: %v", err)
	}
	for _, e := range kc.Events {
		if rec := get(t, kept, e.ID); rec.Status != outbox.StatusSent || string(rec.Payload) != string(e.Payload) || rec.SentAt.IsZero() {
			t.Errorf("after AckClaim with KeepSent: %s; want SENT with its payload and sent_at", describe(rec))
		}
	}
}

// testLeaseExpiry: an expired lease lets another owner take the events,
// and the stale owner then changes nothing.
func (s *suite) testLeaseExpiry(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	enqueue(t, fx, msg("e1", ""), msg("e2", "K"))
	before := time.Now()
	r := req(s.lease("stale"), 10)
	r.LeaseFor = 3 * time.Second // outlasts a claim on a loaded machine
	old := claim(t, fx, r)
	after := time.Now()
	wantLabels(t, "claim with LeaseFor 3s", old.Events, "e1", "e2")
	if !within(old.Until, before.Add(r.LeaseFor), after.Add(r.LeaseFor), time.Second) {
		t.Errorf("Claim(LeaseFor 3s) Until = %v; want about now+3s (%v): lease times come from the database clock", old.Until, before.Add(r.LeaseFor))
	}
	rec := get(t, fx, old.Events[0].ID)
	if rec.Status != outbox.StatusSending || rec.LeaseOwner != "stale" || !near(rec.LeaseUntil, old.Until, 100*time.Millisecond) {
		t.Errorf("Get of a claimed event: %s; want SENDING, owner stale, lease until %v", describe(rec), old.Until)
	}
	if c := claim(t, fx, req(s.lease("fresh"), 10)); len(c.Events) != 0 {
		t.Fatalf("another owner claimed %v while the 3s lease was live", labels(c.Events))
	}
	fresh := s.eventually(t, fx, "fresh", 10, 10*time.Second)
	if got := time.Now(); got.Before(old.Until.Add(-250 * time.Millisecond)) {
		t.Errorf("another owner took the events at %v, before the lease ran out at %v", got, old.Until)
	}
	wantLabels(t, "claim after the 3s lease expired", fresh.Events, "e1", "e2")
	id1, id2 := fresh.Events[0].ID, fresh.Events[1].ID
	snap := map[int64]store.Record{id1: get(t, fx, id1), id2: get(t, fx, id2)}
	for id, rec := range snap {
		if rec.Status != outbox.StatusSending || rec.LeaseOwner != "fresh" {
			t.Errorf("Get(%d) after the takeover: %s; want SENDING under owner fresh", id, describe(rec))
		}
	}
	unchanged := func(op string) {
		t.Helper()
		for id, was := range snap {
			now := get(t, fx, id)
			if now.Status != was.Status || now.LeaseOwner != was.LeaseOwner || now.Attempts != was.Attempts ||
				now.LastError != was.LastError || !now.LeaseUntil.Equal(was.LeaseUntil) {
				t.Errorf("stale %s changed event %d: was %s, now %s", op, id, describe(was), describe(now))
			}
		}
	}
	ctx := t.Context()
	both := []int64{id1, id2}
	if err := fx.Store.Ack(ctx, driver.AckParams{Lease: old.Lease, IDs: both}); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Ack by the stale owner: %v; want driver.ErrLeaseLost", err)
	}
	unchanged("Ack")
	if err := fx.Store.Retry(ctx, driver.RetryParams{Lease: old.Lease, Retries: []driver.Retry{{ID: id1, Delay: time.Hour, Error: "stale"}, {ID: id2, Error: "stale"}}}); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Retry by the stale owner: %v; want driver.ErrLeaseLost", err)
	}
	unchanged("Retry")
	if err := fx.Store.Bury(ctx, driver.BuryParams{Lease: old.Lease, Burials: []driver.Burial{{ID: id1, Error: "stale"}, {ID: id2, Error: "stale"}}}); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Bury by the stale owner: %v; want driver.ErrLeaseLost", err)
	}
	unchanged("Bury")
	if err := fx.Store.Release(ctx, driver.ReleaseParams{Lease: old.Lease, IDs: both}); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Release by the stale owner: %v; want driver.ErrLeaseLost", err)
	}
	unchanged("Release")
	if _, err := fx.Store.Extend(ctx, driver.ExtendParams{Lease: old.Lease, IDs: both, For: time.Hour}); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Extend by the stale owner: %v; want driver.ErrLeaseLost", err)
	}
	unchanged("Extend")
	if c := claim(t, fx, req(s.lease("third"), 10)); len(c.Events) != 0 {
		t.Errorf("a third owner claimed %v while the new lease was live", labels(c.Events))
	}
	ack(t, fx, fresh)
	wantNotFound(t, fx, id1, "after the new owner's Ack")
	wantNotFound(t, fx, id2, "after the new owner's Ack")
	if err := fx.Store.Ack(ctx, driver.AckParams{Lease: fresh.Lease, IDs: both}); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("a second Ack of the same events: %v; want driver.ErrLeaseLost (they were acked already)", err)
	}
}

// testLeaseFencingEpoch: the epoch fences one owner's own claims: after
// the owner's first lease expired and it claimed again, the first lease is
// stale.
func (s *suite) testLeaseFencingEpoch(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	enqueue(t, fx, msg("e1", ""))
	r := req(s.lease("relay"), 10)
	r.LeaseFor = time.Second
	first := claim(t, fx, r)
	wantLabels(t, "first claim", first.Events, "e1")
	second := s.eventually(t, fx, "relay", 10, 5*time.Second)
	wantLabels(t, "claim by the same owner after its lease expired", second.Events, "e1")
	if second.Lease == first.Lease {
		t.Fatalf("two claims returned the same lease %+v; each claim needs its own epoch", first.Lease)
	}
	id := first.Events[0].ID
	was := get(t, fx, id)
	ctx := t.Context()
	_, extendErr := fx.Store.Extend(ctx, driver.ExtendParams{Lease: first.Lease, IDs: []int64{id}, For: time.Hour})
	stale := []struct {
		op  string
		err error
	}{
		{"Ack", fx.Store.Ack(ctx, driver.AckParams{Lease: first.Lease, IDs: []int64{id}})},
		{"Retry", fx.Store.Retry(ctx, driver.RetryParams{Lease: first.Lease, Retries: []driver.Retry{{ID: id, Delay: time.Hour, Error: "stale"}}})},
		{"Bury", fx.Store.Bury(ctx, driver.BuryParams{Lease: first.Lease, Burials: []driver.Burial{{ID: id, Error: "stale"}}})},
		{"Release", fx.Store.Release(ctx, driver.ReleaseParams{Lease: first.Lease, IDs: []int64{id}})},
		{"Extend", extendErr},
	}
	for _, st := range stale {
		if !errors.Is(st.err, driver.ErrLeaseLost) {
			t.Errorf("%s with the owner's older epoch: %v; want driver.ErrLeaseLost (every change is a compare-and-swap on owner and epoch)", st.op, st.err)
		}
	}
	if now := get(t, fx, id); now.Status != outbox.StatusSending || now.Attempts != was.Attempts || now.LastError != was.LastError || !now.LeaseUntil.Equal(was.LeaseUntil) {
		t.Errorf("operations with a stale epoch changed the event: was %s, now %s", describe(was), describe(now))
	}
	ack(t, fx, second)
}

// testLeaseExtend: Extend keeps a lease alive past its first expiry.
func (s *suite) testLeaseExtend(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	enqueue(t, fx, msg("e1", ""), msg("e2", "K"))
	r := req(s.lease("relay"), 10)
	r.LeaseFor = 3 * time.Second // outlasts a claim on a loaded machine
	c := claim(t, fx, r)
	wantLabels(t, "claim with LeaseFor 3s", c.Events, "e1", "e2")
	time.Sleep(300 * time.Millisecond)
	before := time.Now()
	until, err := fx.Store.Extend(t.Context(), driver.ExtendParams{Lease: c.Lease, IDs: ids(c.Events), For: 6 * time.Second})
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if !within(until, before.Add(6*time.Second), time.Now().Add(6*time.Second), time.Second) {
		t.Errorf("Extend(6s) returned %v; want about now+6s (%v)", until, before.Add(6*time.Second))
	}
	if rec := get(t, fx, c.Events[0].ID); !near(rec.LeaseUntil, until, 100*time.Millisecond) {
		t.Errorf("Get after Extend: LeaseUntil %v; want %v as Extend returned", rec.LeaseUntil, until)
	}
	sleepUntil(c.Until.Add(700 * time.Millisecond))
	if other := claim(t, fx, req(s.lease("other"), 10)); len(other.Events) != 0 {
		t.Fatalf("another owner claimed %v after the first expiry of an extended lease", labels(other.Events))
	}
	ack(t, fx, c)
}

// testLeaseRelease: Release gives events back untouched and claimable now.
func (s *suite) testLeaseRelease(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	enqueue(t, fx, msg("e1", ""), msg("e2", "K"))
	a := claim(t, fx, req(s.lease("relay-a"), 10))
	wantLabels(t, "first claim", a.Events, "e1", "e2")
	if err := fx.Store.Retry(t.Context(), driver.RetryParams{Lease: a.Lease, Retries: []driver.Retry{{ID: a.Events[0].ID, Delay: 0, Error: "flaky"}}}); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if err := fx.Store.Release(t.Context(), driver.ReleaseParams{Lease: a.Lease, IDs: ids(a.Events[1:])}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	b := claim(t, fx, req(s.lease("relay-b"), 10))
	wantLabels(t, "claim right after Retry(0) and Release", b.Events, "e1", "e2")
	if err := fx.Store.Release(t.Context(), driver.ReleaseParams{Lease: b.Lease, IDs: ids(b.Events)}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	e1, e2 := get(t, fx, b.Events[0].ID), get(t, fx, b.Events[1].ID)
	if e1.Status != outbox.StatusNew || e1.Attempts != 1 || e1.LastError != "flaky" || !e1.LeaseUntil.IsZero() {
		t.Errorf("released e1 (retried once before): %s; want NEW, attempts 1, last error \"flaky\", no lease", describe(e1))
	}
	if e2.Status != outbox.StatusNew || e2.Attempts != 0 || e2.LastError != "" || !e2.LeaseUntil.IsZero() {
		t.Errorf("released e2: %s; want NEW, attempts 0, no last error, no lease", describe(e2))
	}
	c := claim(t, fx, req(s.lease("relay-c"), 10))
	wantLabels(t, "claim right after Release", c.Events, "e1", "e2")
	if c.Events[0].Attempts != 1 || c.Events[1].Attempts != 0 {
		t.Errorf("after Release, attempts are %d and %d; want 1 and 0 (Release must not count an attempt)", c.Events[0].Attempts, c.Events[1].Attempts)
	}
	ack(t, fx, c)
}

// testLeasePartialAck: an Ack naming ids of another lease (here the same
// relay's next claim) acks its own and reports ErrLeaseLost.
func (s *suite) testLeasePartialAck(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	enqueue(t, fx, msg("e1", ""), msg("e2", ""), msg("e3", ""))
	a := claim(t, fx, req(s.lease("relay"), 2))
	wantLabels(t, "first claim", a.Events, "e1", "e2")
	b := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "second claim", b.Events, "e3")
	err := fx.Store.Ack(t.Context(), driver.AckParams{Lease: a.Lease, IDs: []int64{a.Events[0].ID, a.Events[1].ID, b.Events[0].ID}})
	if !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Ack naming an id held by another lease: %v; want driver.ErrLeaseLost", err)
	}
	wantNotFound(t, fx, a.Events[0].ID, "after a partial Ack (the held ids must still be acked)")
	wantNotFound(t, fx, a.Events[1].ID, "after a partial Ack (the held ids must still be acked)")
	if rec := get(t, fx, b.Events[0].ID); rec.Status != outbox.StatusSending || rec.LeaseOwner != "relay" {
		t.Errorf("the other lease's event after a partial Ack: %s; want SENDING under relay", describe(rec))
	}
	ack(t, fx, b)
}
