package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// A relay process that died holding a claim, restarted under the same
// Owner name: the new process must not publish the key's later events
// before the dead one's claimed (earlier) events, which come back only when
// that claim's lease expires. The new process is a new owner (its name
// gets an incarnation suffix), so it waits for the old shard and claim
// leases like any other relay.
func TestOwnedRestartUnderTheSameOwnerKeepsKeyOrder(t *testing.T) {
	forEachOpened(t, func(t *testing.T, o teststores.Opened) {
		st := o.Store
		own := st
		msgs := make([]outbox.Message, 5)
		for i := range msgs {
			msgs[i] = outbox.Message{Topic: "t", Key: "k", Type: "Bumped", Payload: fmt.Appendf(nil, "k#%d", i+1)}
		}
		if err := st.Enqueue(context.Background(), msgs...); err != nil {
			t.Fatal(err)
		}
		// The process that died: it took the shards and claimed k#1, then
		// stopped answering (its leases run out in 2 s).
		ctx := context.Background()
		const lease = 2 * time.Second
		ship, err := own.Balance(ctx, driver.BalanceParams{Owner: "relay-x", LeaseFor: lease})
		if err != nil {
			t.Fatal(err)
		}
		var shards []driver.ShardLease
		for _, sh := range ship.Held {
			if !sh.Revoke {
				shards = append(shards, sh)
			}
		}
		c, err := own.Claim(ctx, driver.ClaimParams{
			Lease:    driver.Lease{Owner: "relay-x", Epoch: 1},
			Limit:    1,
			LeaseFor: lease,
			Shards:   shards,
		})
		if err != nil || len(c.Events) != 1 {
			t.Fatalf("the dead process's claim: %d events, %v; want 1", len(c.Events), err)
		}
		// Restarted under the same name.
		mb := newMem(t, membroker.Config{})
		cfg := fastConfig()
		cfg.Owner = "relay-x"
		r, _ := run(t, st, mb, cfg)
		if got := r.Owner(); !strings.HasPrefix(got, "relay-x~") || len(got) != len("relay-x~")+8 {
			t.Errorf("Owner() = %q, want relay-x~ and 8 hex digits", got)
		}
		waitFor(t, "delivery", 30*time.Second, func() bool { return pending(t, st).Pending() == 0 })
		checkDelivered(t, msgs, mb.Events("t"))
	})
}

// A name that ends in ~ and 8 hex digits is unique per process already
// (a supervisor made it so): it is kept.
func TestOwnerWithAnIncarnationKept(t *testing.T) {
	st := teststores.Open(t, "sqlite", store.Options{}).Store
	for name, kept := range map[string]bool{"relay-y~0000002a": true, "relay-y~0000002A": false, "~0000002a": false, "relay-y~2a": false} {
		cfg := fastConfig()
		cfg.Owner = name
		r, err := relay.New(st, newMem(t, membroker.Config{}), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Owner() == name; got != kept {
			t.Errorf("Owner %q became %q; kept = %v, want %v", name, r.Owner(), got, kept)
		}
	}
}
