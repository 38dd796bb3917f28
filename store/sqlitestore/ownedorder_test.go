package sqlitestore_test

import (
	"context"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/sqlitestore"
)

// The claim-start window of the other stores (a key's earlier row judged
// "not due" by a claim clock that is behind the row's created_at, while
// its later row is due) on SQLite. Writers are serialized by the write
// lock (this store's transactions take it at BEGIN) and a row's
// created_at is read under it, so writer A, which begins first, blocks B
// until it commits: ids and created_at agree, and the interleaving cannot
// happen. What SQLite cannot rule out is the clock itself: stepped back
// (NTP) after B's insert, A's row has the earlier created_at and a claim
// runs at A's time (replayed by moving B's timestamps ahead). A row never
// delayed is due whatever the clock says.
func TestClaimKeyOrderAcrossClaimStart(t *testing.T) {
	ctx := context.Background()
	st := openOwned(t)
	msg := func(v string) outbox.Message {
		return outbox.Message{Topic: "t", Key: "k", Type: "T", Payload: []byte(`{"v":` + v + `}`)}
	}
	epoch := int64(0)
	claim := func() []outbox.Event {
		epoch++
		req := driver.ClaimParams{Lease: driver.Lease{Owner: "relay-a", Epoch: epoch}, Limit: 10, LeaseFor: time.Minute}
		own := balance(t, st, driver.BalanceParams{Owner: "relay-a", LeaseFor: time.Minute})
		req.Shards = own.Held
		c, err := st.Claim(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Events) > 0 {
			if err := st.Release(ctx, driver.ReleaseParams{Lease: c.Lease, IDs: ids(c.Events)}); err != nil {
				t.Fatal(err)
			}
		}
		return c.Events
	}
	check := func(what string, evs []outbox.Event, rows []int64) {
		t.Helper()
		for i, e := range evs {
			if i >= len(rows) || e.ID != rows[i] {
				t.Fatalf("%s: claim took %v of the key's rows %v: not a prefix, in order", what, ids(evs), rows)
			}
		}
	}
	// The clock stepped back between B's insert and A's.
	if err := st.Enqueue(ctx, msg("1")); err != nil {
		t.Fatal(err)
	}
	ahead := (5 * time.Second).Microseconds()
	if _, err := st.DB().ExecContext(ctx, "UPDATE "+st.Table()+" SET created_at = created_at + ?1, next_attempt_at = next_attempt_at + ?1", ahead); err != nil {
		t.Fatal(err)
	}
	if err := st.Enqueue(ctx, msg("2")); err != nil {
		t.Fatal(err)
	}
	rows := rowIDs(t, st)
	evs := claim()
	check("after a clock step", evs, rows)
	if len(evs) != 2 {
		t.Fatalf("after a clock step: claim took %v of %v; want both (neither was ever delayed)", ids(evs), rows)
	}
}

func ids(evs []outbox.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

func rowIDs(t *testing.T, st *sqlitestore.Store) []int64 {
	t.Helper()
	rows, err := st.DB().QueryContext(t.Context(), "SELECT id FROM "+st.Table()+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
