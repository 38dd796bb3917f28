package sqlitestore_test

import (
	"errors"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"

	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/sqlitestore"
)

// TestClaimWalkAndAnotherOwnersRelease: relay a stalled, left its shard to
// b, and the lease of its claim of k#2 ran out while its claim of k#1 is
// still live. a then tries to give k#1 back (Release: NEW, due at once),
// at the worst moment when it can: while b's claim is between its walk and
// its write transaction. b's claims must take k#1 before k#2. (They did
// not: b's claim checked for another owner's live claim only in its write
// transaction, after the walk had read past k#1, and a's Release came in
// between. Now the claim checks before the walk, and a relay can no longer
// renew or give back an event once another holds the shard.)
func TestClaimWalkAndAnotherOwnersRelease(t *testing.T) {
	st := openOwned(t)
	enqueueKeyed(t, st, "k", 2)
	a := balance(t, st, driver.BalanceParams{Owner: "a", LeaseFor: time.Minute})
	c1, err := st.Claim(t.Context(), driver.ClaimParams{Lease: driver.Lease{Owner: "a", Epoch: 1}, Limit: 1, LeaseFor: 4 * time.Second, Shards: a.Held})
	if err != nil || len(c1.Events) != 1 {
		t.Fatalf("a's first claim: %v, %v; want k#1", payloads(c1.Events), err)
	}
	c2, err := st.Claim(t.Context(), driver.ClaimParams{Lease: driver.Lease{Owner: "a", Epoch: 2}, Limit: 10, LeaseFor: time.Second, Shards: a.Held})
	if err != nil || len(c2.Events) != 1 {
		t.Fatalf("a's second claim, k#1 in flight: %v, %v; want k#2", payloads(c2.Events), err)
	}
	balance(t, st, driver.BalanceParams{Owner: "a", Leave: true})
	time.Sleep(time.Until(c2.Until.Add(200 * time.Millisecond)))
	b := balance(t, st, driver.BalanceParams{Owner: "b", LeaseFor: time.Minute})
	if len(b.Held) == 0 {
		t.Fatal("b did not take the shard a left")
	}
	release := func() {
		err := st.Release(t.Context(), driver.ReleaseParams{Lease: c1.Lease, IDs: []int64{c1.Events[0].ID}})
		if !errors.Is(err, driver.ErrLeaseLost) {
			t.Errorf("a gives k#1 back while b holds the shard: %v; want ErrLeaseLost", err)
		}
	}
	sqlitestore.SetAfterWalk(release)
	t.Cleanup(func() { sqlitestore.SetAfterWalk(nil) })
	release()
	var got []string
	deadline := time.Now().Add(30 * time.Second)
	for n := int64(1); len(got) < 2; n++ {
		if time.Now().After(deadline) {
			t.Fatalf("b's claims took %v in 30 s", got)
		}
		c, err := st.Claim(t.Context(), driver.ClaimParams{Lease: driver.Lease{Owner: "b", Epoch: n}, Limit: 10, LeaseFor: time.Minute, Shards: b.Held})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range c.Events {
			got = append(got, string(e.Payload))
		}
		if len(c.Events) > 0 {
			if err := st.Ack(t.Context(), driver.AckParams{Lease: c.Lease, IDs: ids(c.Events)}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got[0] != "k#1" || got[1] != "k#2" {
		t.Fatalf("b's claims took %v; want [k#1 k#2]", got)
	}
}

// TestClaimWalkBoundAndExpiredClaims: more NEW rows than a claim's walk
// reads (not due, keyless) lie below a key's released first event k#1,
// and the key's next event k#2 is an expired claim of a relay that died.
// The walk stops at its bound before it reaches k#1; it must not take k#2
// (it did: the expired claims left after the NEW read were all taken).
func TestClaimWalkBoundAndExpiredClaims(t *testing.T) {
	st := openOwned(t)
	ctx := t.Context()
	later := time.Now().Add(time.Hour).UnixMicro()
	if _, err := st.DB().ExecContext(ctx, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1100) INSERT INTO "+st.Table()+" (topic, event_type, payload, next_attempt_at) SELECT 't', 'T', x'00', ?1 FROM n", later); err != nil {
		t.Fatal(err)
	}
	enqueueKeyed(t, st, "k", 2)
	past := time.Now().Add(-time.Minute).UnixMicro()
	if _, err := st.DB().ExecContext(ctx, "UPDATE "+st.Table()+" SET status = 'SENDING', lease_owner = 'a', lease_epoch = 1, lease_until = ?1 WHERE id = (SELECT max(id) FROM "+st.Table()+")", past); err != nil {
		t.Fatal(err)
	}
	b := balance(t, st, driver.BalanceParams{Owner: "b", LeaseFor: time.Minute})
	claim := func(epoch int64, limit int) []outbox.Event {
		c, err := st.Claim(ctx, driver.ClaimParams{Lease: driver.Lease{Owner: "b", Epoch: epoch}, Limit: limit, LeaseFor: time.Minute, Shards: b.Held})
		if err != nil {
			t.Fatal(err)
		}
		return c.Events
	}
	// Limit 1: the walk reads about 1,005 rows, all before k#1
	if got := claim(1, 1); len(got) > 0 {
		t.Fatalf("a claim whose walk stopped before k#1 took %s; want nothing", payloads(got))
	}
	// Limit 10: the walk reads past the 1,100 rows, to k#1
	if got := payloads(claim(2, 10)); got != "[k#1 k#2]" {
		t.Fatalf("a claim whose walk reached k#1 took %s; want [k#1 k#2]", got)
	}
}
