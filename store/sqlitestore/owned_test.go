package sqlitestore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/sqlitestore"
)

func openOwned(t *testing.T) *sqlitestore.Store {
	t.Helper()
	st, err := sqlitestore.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "o.db"), sqlitestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return st
}

func balance(t *testing.T, st *sqlitestore.Store, req driver.BalanceParams) driver.Ownership {
	t.Helper()
	o, err := st.Balance(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func claimOwned(t *testing.T, st *sqlitestore.Store, o driver.Ownership, owner string, epoch int64, limit int) []outbox.Event {
	t.Helper()
	c, err := st.Claim(t.Context(), driver.ClaimParams{
		Lease:        driver.Lease{Owner: owner, Epoch: epoch},
		Limit:        limit,
		LeaseFor:     5 * time.Second,
		HoldDeadKeys: true,
		Shards:       o.Held,
	})
	if errors.Is(err, driver.ErrLeaseLost) {
		return nil // not held (any more)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c.Events
}

func payloads(evs []outbox.Event) string {
	var out []string
	for _, e := range evs {
		out = append(out, string(e.Payload))
	}
	return fmt.Sprint(out)
}

func enqueueKeyed(t *testing.T, st *sqlitestore.Store, key string, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		if err := st.Enqueue(t.Context(), outbox.Message{Topic: "t", Key: key, Type: "T", Payload: fmt.Appendf(nil, "%s#%d", key, i)}); err != nil {
			t.Fatal(err)
		}
	}
}

func parked(t *testing.T, st *sqlitestore.Store) int {
	t.Helper()
	var n int
	if err := st.DB().QueryRow("SELECT count(*) FROM " + st.Table() + " WHERE parked = 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// One shard: the first relay holds it, the second waits, and takes it
// over (with a new epoch) when the first leaves.
func TestOwnedOneShardChangesHandsOnLeave(t *testing.T) {
	st := openOwned(t)
	a := balance(t, st, driver.BalanceParams{Owner: "a", LeaseFor: 5 * time.Second})
	b := balance(t, st, driver.BalanceParams{Owner: "b", LeaseFor: 5 * time.Second})
	if a.Shards != 1 || len(a.Held) != 1 || a.Held[0].Revoke || len(b.Held) != 0 || b.Relays != 2 {
		t.Fatalf("a=%+v b=%+v: want a to hold the one shard, b nothing, 2 relays", a, b)
	}
	if a2 := balance(t, st, driver.BalanceParams{Owner: "a", LeaseFor: 5 * time.Second}); len(a2.Held) != 1 || a2.Held[0].Epoch != a.Held[0].Epoch {
		t.Fatalf("renewal changed the lease: %+v then %+v", a, a2)
	}
	if l := balance(t, st, driver.BalanceParams{Owner: "a", Leave: true}); len(l.Held) != 0 {
		t.Fatalf("after Leave a holds %+v", l.Held)
	}
	b = balance(t, st, driver.BalanceParams{Owner: "b", LeaseFor: 5 * time.Second})
	if len(b.Held) != 1 || b.Held[0].Epoch <= a.Held[0].Epoch || b.Relays != 1 {
		t.Fatalf("b = %+v: want the shard under a newer epoch than %d", b, a.Held[0].Epoch)
	}
	// a's old epoch claims nothing any more
	enqueueKeyed(t, st, "k", 1)
	if got := claimOwned(t, st, a, "a", 1, 10); len(got) != 0 {
		t.Fatalf("a claimed %s from a shard it gave up", payloads(got))
	}
	if got := claimOwned(t, st, b, "b", 1, 10); len(got) != 1 {
		t.Fatalf("b claimed %s, want k#1", payloads(got))
	}
}

// A relay that stalls past its lease loses the shard; the new holder does
// not claim while the stalled relay's claims are live.
func TestOwnedTakeoverAfterExpiry(t *testing.T) {
	st := openOwned(t)
	ctx := t.Context()
	enqueueKeyed(t, st, "k", 3)
	// a takes the shard for 300 ms and claims k#1 under it, for a minute:
	// the claim must outlive everything below, however slow the machine.
	// A loaded machine may stall past the 300 ms between the two calls
	// (the claim then finds the shard's lease run out): take it again.
	var a driver.Ownership
	var c driver.Claim
	for attempt := 1; ; attempt++ {
		a = balance(t, st, driver.BalanceParams{Owner: "a", LeaseFor: 300 * time.Millisecond})
		var err error
		c, err = st.Claim(ctx, driver.ClaimParams{
			Lease:    driver.Lease{Owner: "a", Epoch: 1},
			Limit:    1,
			LeaseFor: time.Minute,
			Shards:   a.Held,
		})
		if errors.Is(err, driver.ErrLeaseLost) && attempt < 20 {
			t.Logf("attempt %d: the 300 ms lease ran out before the claim (a stalled machine): %v", attempt, err)
			continue
		}
		if err != nil || len(c.Events) != 1 {
			t.Fatalf("claim: %v %v", c.Events, err)
		}
		break
	}
	time.Sleep(400 * time.Millisecond) // a's shard lease has run out
	b := balance(t, st, driver.BalanceParams{Owner: "b", LeaseFor: 5 * time.Second})
	if len(b.Held) != 1 || b.Held[0].Epoch <= a.Held[0].Epoch {
		t.Fatalf("b = %+v: want the expired shard", b)
	}
	if got := claimOwned(t, st, b, "b", 1, 10); len(got) != 0 {
		t.Fatalf("b claimed %s while a's claim is live", payloads(got))
	}
	if got := claimOwned(t, st, a, "a", 2, 10); len(got) != 0 {
		t.Fatalf("a claimed %s from a shard that changed hands", payloads(got))
	}
	if err := st.Ack(ctx, driver.AckParams{Lease: c.Lease, IDs: []int64{c.Events[0].ID}}); err != nil {
		t.Fatal(err)
	}
	if got := claimOwned(t, st, b, "b", 2, 10); payloads(got) != "[k#2 k#3]" {
		t.Fatalf("b claimed %s, want [k#2 k#3]", payloads(got))
	}
}

// The owner's own claims do not hold a key: its next events are claimed
// while the earlier ones are in flight (the relay orders them).
func TestOwnedClaimPipelinesAKey(t *testing.T) {
	st := openOwned(t)
	o := balance(t, st, driver.BalanceParams{Owner: "a"})
	enqueueKeyed(t, st, "k", 4)
	if got := claimOwned(t, st, o, "a", 1, 2); payloads(got) != "[k#1 k#2]" {
		t.Fatalf("first claim %s", payloads(got))
	}
	if got := claimOwned(t, st, o, "a", 2, 10); payloads(got) != "[k#3 k#4]" {
		t.Fatalf("second claim %s", payloads(got))
	}
}

// A retrying event parks the later events of its key (they leave the claim
// index), other keys flow; its ack unparks them, in order.
func TestOwnedParkingBehindARetry(t *testing.T) {
	// The claim behind the retry must come before its 300 ms delay runs
	// out; on a loaded machine that stalled past it, the check does not
	// apply: run the whole case again on a fresh table.
	for attempt := 1; !parkingBehindARetry(t, 300*time.Millisecond); attempt++ {
		if attempt == 10 {
			t.Fatalf("%d attempts, each stalled past the retry's delay before the claim behind it", attempt)
		}
	}
}

// parkingBehindARetry is TestOwnedParkingBehindARetry's case once; false
// when the claim behind the retry came after delay (nothing checked yet).
func parkingBehindARetry(t *testing.T, delay time.Duration) bool {
	st := openOwned(t)
	ctx := t.Context()
	o := balance(t, st, driver.BalanceParams{Owner: "a"})
	enqueueKeyed(t, st, "k", 1)
	first := claimOwned(t, st, o, "a", 1, 10)
	retried := time.Now()
	if err := st.Retry(ctx, driver.RetryParams{Lease: driver.Lease{Owner: "a", Epoch: 1}, Retries: []driver.Retry{{ID: first[0].ID, Delay: delay, Error: "x"}}}); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 4; i++ {
		if err := st.Enqueue(ctx, outbox.Message{Topic: "t", Key: "k", Type: "T", Payload: fmt.Appendf(nil, "k#%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	enqueueKeyed(t, st, "other", 2)
	got := claimOwned(t, st, o, "a", 2, 10)
	n := parked(t, st)
	if took := time.Since(retried); took >= delay {
		t.Logf("the claim behind the retry came %v after it, past its %v delay (a stalled machine): again", took, delay)
		return false
	}
	if payloads(got) != "[other#1 other#2]" {
		t.Fatalf("claim behind a retry: %s", payloads(got))
	}
	if n != 3 {
		t.Fatalf("parked %d rows, want k#2..k#4", n)
	}
	time.Sleep(delay + 50*time.Millisecond)
	got = claimOwned(t, st, o, "a", 3, 10)
	if payloads(got) != "[k#1]" {
		t.Fatalf("after the delay: %s, want the retried k#1 alone", payloads(got))
	}
	if err := st.Ack(ctx, driver.AckParams{Lease: driver.Lease{Owner: "a", Epoch: 3}, IDs: []int64{got[0].ID}}); err != nil {
		t.Fatal(err)
	}
	if n := parked(t, st); n != 0 {
		t.Fatalf("%d rows still parked after the ack", n)
	}
	if got := claimOwned(t, st, o, "a", 4, 10); payloads(got) != "[k#2 k#3 k#4]" {
		t.Fatalf("after the ack: %s", payloads(got))
	}
	return true
}

// A DEAD event parks its key's later events while dead keys are held;
// requeue and purge unpark them; a row parked by mistake (a race on
// another database) is unparked by Balance.
func TestOwnedParkingBehindDead(t *testing.T) {
	st := openOwned(t)
	ctx := t.Context()
	o := balance(t, st, driver.BalanceParams{Owner: "a"})
	enqueueKeyed(t, st, "k", 3)
	first := claimOwned(t, st, o, "a", 1, 1)
	if err := st.Bury(ctx, driver.BuryParams{Lease: driver.Lease{Owner: "a", Epoch: 1}, Burials: []driver.Burial{{ID: first[0].ID, Error: "poison"}}}); err != nil {
		t.Fatal(err)
	}
	if got := claimOwned(t, st, o, "a", 2, 10); len(got) != 0 {
		t.Fatalf("claimed %s behind a dead event", payloads(got))
	}
	if n := parked(t, st); n != 2 {
		t.Fatalf("parked %d, want 2", n)
	}
	if n, err := st.RequeueDead(ctx, store.DeadQuery{}); err != nil || n != 1 {
		t.Fatalf("requeue: %d %v", n, err)
	}
	if n := parked(t, st); n != 0 {
		t.Fatalf("parked %d after requeue", n)
	}
	got := claimOwned(t, st, o, "a", 3, 10)
	if payloads(got) != "[k#1 k#2 k#3]" {
		t.Fatalf("after requeue: %s", payloads(got))
	}
	// bury k#1 again, park the rest, purge the dead one
	if err := st.Bury(ctx, driver.BuryParams{Lease: driver.Lease{Owner: "a", Epoch: 3}, Burials: []driver.Burial{{ID: got[0].ID, Error: "poison"}}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, driver.ReleaseParams{Lease: driver.Lease{Owner: "a", Epoch: 3}, IDs: []int64{got[1].ID, got[2].ID}}); err != nil {
		t.Fatal(err)
	}
	if got := claimOwned(t, st, o, "a", 4, 10); len(got) != 0 || parked(t, st) != 2 {
		t.Fatalf("claimed %s behind a dead event, %d parked", payloads(got), parked(t, st))
	}
	if n, err := st.Purge(ctx, store.PurgeRequest{Status: outbox.StatusDead}); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if n := parked(t, st); n != 0 {
		t.Fatalf("parked %d after purge", n)
	}
	// rows parked with nothing before them: Balance sweeps the key's
	// head free, and its ack the rest
	if _, err := st.DB().Exec("UPDATE " + st.Table() + " SET parked = 1"); err != nil {
		t.Fatal(err)
	}
	balance(t, st, driver.BalanceParams{Owner: "a"})
	got = claimOwned(t, st, o, "a", 5, 10)
	if payloads(got) != "[k#2]" {
		t.Fatalf("after the sweep: %s", payloads(got))
	}
	if err := st.Ack(ctx, driver.AckParams{Lease: driver.Lease{Owner: "a", Epoch: 5}, IDs: []int64{got[0].ID}}); err != nil {
		t.Fatal(err)
	}
	if got := claimOwned(t, st, o, "a", 6, 10); payloads(got) != "[k#3]" {
		t.Fatalf("after the ack: %s", payloads(got))
	}
}

// Bad input is refused with a message, not a panic.
func TestOwnedBalanceRefusesAnEmptyOwner(t *testing.T) {
	st := openOwned(t)
	_, err := st.Balance(context.Background(), driver.BalanceParams{})
	if err == nil || errors.Is(err, store.ErrNotMigrated) {
		t.Fatalf("err = %v", err)
	}
}

// A payload a plain-SQL producer stored as TEXT weighs its bytes against
// MaxBytes, not its characters: two payloads of four '€' (12 bytes each)
// do not fit in 20 bytes together.
func TestOwnedMaxBytesCountsTextPayloadsInBytes(t *testing.T) {
	st := openOwned(t)
	o := balance(t, st, driver.BalanceParams{Owner: "a"})
	enqueueKeyed(t, st, "k", 2)
	if _, err := st.DB().Exec("UPDATE " + st.Table() + " SET payload = '€€€€'"); err != nil {
		t.Fatal(err)
	}
	c, err := st.Claim(t.Context(), driver.ClaimParams{
		Lease: driver.Lease{Owner: "a", Epoch: 1}, Limit: 10, LeaseFor: 5 * time.Second,
		Shards: o.Held, MaxBytes: 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Events) != 1 {
		t.Fatalf("a claim of at most 20 bytes took %d TEXT payloads of 12 bytes; want 1", len(c.Events))
	}
}
