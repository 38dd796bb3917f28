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

// A claim that began under a live lease may still be running when the
// lease runs out (here it waits behind an expired claim a stale holder has
// locked), or when its relay has released the shards (a relay that gave
// up on a claim, its context ended, and left: the server still runs it).
// Another relay's heartbeat must not take the shards until that claim has
// committed: the new owner's claims would not see the rows it takes, and
// would hand them out a second time, ahead of or beside it. Once it
// committed, the shards change hands and the new owner's claim leaves the
// old owner's claimed rows alone while that claim is live.
func TestTakeoverWaitsForTheOldOwnersClaim(t *testing.T) {
	t.Run("expired", func(t *testing.T) { testTakeoverWaits(t, false) })
	t.Run("released", func(t *testing.T) { testTakeoverWaits(t, true) })
}

func testTakeoverWaits(t *testing.T, leave bool) {
	pool, _ := openPool(t)
	ctx := context.Background()
	st, table := migratedStore(t, pool, "takeclaim_", pgstore.Config{})
	short := 1500 * time.Millisecond
	if leave {
		short = time.Minute
	}
	first, err := st.Balance(ctx, driver.BalanceParams{Owner: "a", LeaseFor: short})
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
	stale := lockExpiredClaim(t, pool, table)
	type result struct {
		c   driver.Claim
		err error
	}
	claimed := make(chan result, 1)
	go func() {
		c, err := st.Claim(ctx, driver.ClaimParams{Lease: driver.Lease{Owner: "a", Epoch: 1}, Limit: 100, LeaseFor: time.Minute, Shards: first.Held})
		claimed <- result{c, err}
	}()
	waitLocked(t, pool, table)
	if leave {
		if _, err := st.Balance(ctx, driver.BalanceParams{Owner: "a", Leave: true}); err != nil {
			t.Fatal(err)
		}
	} else {
		time.Sleep(time.Until(first.Until) + 200*time.Millisecond) // a's leases run out
	}

	own, err := st.Balance(ctx, driver.BalanceParams{Owner: "b", LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(own.Held) != 0 {
		t.Fatalf("b took %d of a's shards while a's claim was in flight", len(own.Held))
	}
	if err := stale.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// An expired lease that nobody took is still a's: its claim takes
	// the events. A released shard is not: the claim statement, which
	// runs after the wait, takes nothing.
	want := 10
	r := <-claimed
	switch {
	case leave && !errors.Is(r.err, driver.ErrLeaseLost):
		t.Fatalf("a's claim after its relay left: %v; want ErrLeaseLost", r.err)
	case leave:
		want = 0
	case r.err != nil:
		t.Fatal(r.err)
	}
	if len(r.c.Events) != want {
		t.Fatalf("a's claim took %d events, want %d", len(r.c.Events), want)
	}

	own, err = st.Balance(ctx, driver.BalanceParams{Owner: "b", LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(own.Held) != 64 {
		t.Fatalf("after a's claim committed, b took %d shards; want 64", len(own.Held))
	}
	c, err := st.Claim(ctx, driver.ClaimParams{Lease: driver.Lease{Owner: "b", Epoch: 1}, Limit: 100, LeaseFor: time.Minute, Shards: own.Held})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Events) != 10-want {
		t.Fatalf("b claimed %d events, want %d (a's live claim holds the others)", len(c.Events), 10-want)
	}
	// a's claim is fenced: its shards have new epochs.
	if _, err := st.Claim(ctx, driver.ClaimParams{Lease: driver.Lease{Owner: "a", Epoch: 2}, Limit: 100, LeaseFor: time.Minute, Shards: first.Held}); err == nil {
		t.Fatal("a claimed again from shards b holds now")
	}
}
