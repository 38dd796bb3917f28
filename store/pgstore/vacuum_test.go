package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/pgstore"
)

// TestVacuumAfter checks that a Store vacuums its table once it has
// deleted Config.VacuumAfter rows, and never when that is negative.
func TestVacuumAfter(t *testing.T) {
	for _, after := range []int64{100, -1} {
		t.Run(fmt.Sprint(after), func(t *testing.T) {
			pool, _ := openPool(t)
			ctx := context.Background()
			st, table := migratedStore(t, pool, "vacuum_", pgstore.Config{VacuumAfter: after, DisableNotify: true})
			msgs := make([]outbox.Message, 250)
			for i := range msgs {
				msgs[i] = outbox.Message{Topic: "orders", Type: "OrderPaid", Payload: []byte(`{}`)}
			}
			if err := st.Enqueue(ctx, msgs...); err != nil {
				t.Fatal(err)
			}
			for epoch := int64(1); ; epoch++ {
				c := claimAll(t, st, driver.ClaimParams{Lease: driver.Lease{Owner: "v", Epoch: epoch}, Limit: 50, LeaseFor: time.Minute})
				if len(c.Events) == 0 {
					break
				}
				if err := st.AckClaim(ctx, driver.AckClaimParams{Lease: c.Lease, N: len(c.Events)}); err != nil {
					t.Fatal(err)
				}
			}
			vacuums := func() int64 {
				var n int64
				if err := pool.QueryRow(ctx, "SELECT COALESCE(sum(vacuum_count), 0)::bigint FROM pg_stat_user_tables WHERE relname = $1", table).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			deadline := time.Now().Add(10 * time.Second)
			if after < 0 {
				deadline = time.Now().Add(2 * time.Second)
			}
			for vacuums() == 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			switch n := vacuums(); {
			case after > 0 && n == 0:
				t.Fatalf("no VACUUM after 250 deleted rows with VacuumAfter %d (last error: %v)", after, st.LastVacuumError())
			case after < 0 && n != 0:
				t.Fatalf("%d VACUUMs with VacuumAfter %d; want none", n, after)
			}
			if err := st.LastVacuumError(); err != nil {
				t.Fatalf("LastVacuumError: %v", err)
			}
		})
	}
}
