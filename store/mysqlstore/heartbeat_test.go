package mysqlstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
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
	db := openStore(t).DB()
	table := uniqueTable("beat_")
	dropTables(t, db, table)
	st, err := mysqlstore.New(db, mysqlstore.Config{Options: store.Options{Table: table}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var msgs []outbox.Message
	for i := range 20 {
		msgs = append(msgs, outbox.Message{Topic: "t", Key: fmt.Sprintf("k%d", i), Type: "T", Payload: []byte(`{}`)})
	}
	if err := st.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	const leaseFor = 2 * time.Second
	a, err := st.Balance(ctx, store.BalanceRequest{Owner: "a", LeaseFor: leaseFor})
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
		c   store.Claim
		err error
	}
	claimed := make(chan result, 1)
	lease := store.Lease{Owner: "a", Epoch: 1}
	go func() {
		c, err := st.ClaimOwned(ctx, store.OwnedClaimRequest{
			ClaimRequest: store.ClaimRequest{Lease: lease, Limit: 100, LeaseFor: time.Minute},
			Shards:       a.Held,
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

	beat := func(owner string) (store.Ownership, time.Duration) {
		t.Helper()
		bctx, cancel := context.WithTimeout(ctx, heartbeatDeadline)
		defer cancel()
		start := time.Now()
		own, err := st.Balance(bctx, store.BalanceRequest{Owner: owner, LeaseFor: leaseFor})
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
	cb, err := st.ClaimOwned(ctx, store.OwnedClaimRequest{
		ClaimRequest: store.ClaimRequest{Lease: store.Lease{Owner: "b", Epoch: 1}, Limit: 100, LeaseFor: time.Minute},
		Shards:       b.Held,
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
	if err := st.Ack(ctx, lease, ids); err != nil {
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
