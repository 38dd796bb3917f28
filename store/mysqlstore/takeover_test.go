package mysqlstore_test

import (
	"context"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/driver"
)

// TestTakeoverBesideLateExtend: an old owner's Extend that checked its
// lease just before it ran out commits while a new owner's claim reads
// the shard. The claim's plain read saw the row expired; its locked read
// then finds the lease renewed. The shard is the old owner's work again:
// the claim must not take the key's next row while that one is in flight.
// The Extend is replayed by an open transaction that renews the row.
func TestTakeoverBesideLateExtend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, st, table := migratedStore(t, "late_")
	for _, p := range []string{`{"n":1}`, `{"n":2}`} {
		if err := st.Enqueue(ctx, outbox.Message{Topic: "t", Key: "k", Type: "T", Payload: []byte(p)}); err != nil {
			t.Fatal(err)
		}
	}
	// b holds every shard for 1 s and claims the key's first row for 1 s
	b, err := st.Balance(ctx, driver.BalanceParams{Owner: "b", LeaseFor: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := st.Claim(ctx, driver.ClaimParams{Lease: driver.Lease{Owner: "b", Epoch: 1}, Limit: 1, LeaseFor: time.Second, Shards: b.Held})
	if err != nil || len(cb.Events) != 1 {
		t.Fatalf("b's claim: %d events, %v; want the key's first", len(cb.Events), err)
	}
	first := cb.Events[0].ID
	time.Sleep(1500 * time.Millisecond) // both of b's leases run out
	a, err := st.Balance(ctx, driver.BalanceParams{Owner: "a", LeaseFor: time.Minute})
	if err != nil || len(a.Held) != 64 {
		t.Fatalf("a's heartbeat after b's lease ran out: holds %d shards, %v; want 64", len(a.Held), err)
	}

	// b's late Extend: the row renewed, not committed yet
	// (on a connection of its own that lets a transaction idle: the
	// store's pool ends idle ones after a few seconds)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION idle_transaction_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	ext, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Rollback() //nolint:errcheck // a no-op after Commit
	if res, err := ext.ExecContext(ctx, "UPDATE "+table+" SET lease_until = NOW(6) + INTERVAL 60 SECOND WHERE id = ? AND lease_owner = 'b'", first); err != nil {
		t.Fatal(err)
	} else if n, _ := res.RowsAffected(); n != 1 {
		var owner string
		_ = db.QueryRowContext(ctx, "SELECT CONCAT(status, ' ', lease_owner, ' ', COALESCE(lease_until, 'null')) FROM "+table+" WHERE id = ?", first).Scan(&owner)
		t.Fatalf("the late Extend renewed %d rows; want 1 (row %d: %s)", n, first, owner)
	}
	type result struct {
		c   driver.Claim
		err error
	}
	claimed := make(chan result, 1)
	go func() {
		c, err := st.Claim(ctx, driver.ClaimParams{Lease: driver.Lease{Owner: "a", Epoch: 1}, Limit: 10, LeaseFor: time.Minute, Shards: a.Held})
		claimed <- result{c, err}
	}()
	// commit the Extend once the claim waits for its lock, having read
	// the row as expired before: the replay of the race. ext locks that
	// row only, which a claim locks only after its plain reads.
	select {
	case r := <-claimed:
		t.Fatalf("a's claim ended within 1s beside the late Extend's lock (%d events, %v): the replay did not happen", len(r.c.Events), r.err)
	case <-time.After(time.Second):
	}
	if err := ext.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-claimed
	if r.err != nil {
		t.Fatalf("a's claim: %v", r.err)
	}
	if len(r.c.Events) > 0 {
		t.Fatalf("a's claim took %d events (ids %d…) while the key's event %d is in flight with b under a renewed lease; want none", len(r.c.Events), r.c.Events[0].ID, first)
	}
}
