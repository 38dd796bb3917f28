package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// testOwnedSessionLost (stores with driver.Sessions): relay a, in a store
// of its own (a process of its own), holds half the shards and has a
// claim in flight. While its store is open a does not heartbeat (as if
// stopped): b takes none of its shards, and Rebalance says nothing. Then
// a's store closes, as its process's death closes its connections: b's
// Rebalance sees it within a second, b's Balance takes a's shards at once
// with new epochs, and b's claim takes a's claimed events over, all long
// before any lease of a's would end; a's claim is fenced.
func (s *suite) testOwnedSessionLost(t *testing.T) {
	opts := store.Options{Table: newTableName()}
	fx := s.migrated(t, opts)
	b := fx.Store
	st, err := s.h.New(opts)
	if err != nil {
		t.Fatalf("New (relay a's store): %v", err)
	}
	closed := false
	defer func() {
		if !closed {
			st.Close()
		}
	}()
	a := st
	enqueue(t, fx, msg("k1", "K1"), msg("k2", "K2"), msg("k3", "K3"), msg("k4", "K4"), msg("k5", "K5"), msg("k6", "K6"))
	// a alone holds every shard and claims everything, under leases far
	// longer than the test.
	ownA := balance(t, a, driver.BalanceParams{Owner: "a", LeaseFor: shardLease, HoldDeadKeys: true})
	if len(ownA.Held) != ownA.Shards {
		t.Fatalf("a alone holds %d of %d shards", len(ownA.Held), ownA.Shards)
	}
	r := s.ownedReq("a", claimable(ownA), 10, true)
	ca := claimOwned(t, a, r)
	wantLabels(t, "a's claim", ca.Events, "k1", "k2", "k3", "k4", "k5", "k6")

	// a's session lives (its store is open): b gets nothing of a's.
	sb, ok := fx.Store.(driver.Sessions)
	if !ok {
		t.Fatalf("%s: the store does not implement driver.Sessions", s.h.Name)
	}
	if moves, err := sb.Rebalance(t.Context(), "b"); err != nil || moves {
		t.Fatalf("Rebalance while a's session lives: %v, %v; want false", moves, err)
	}
	ownB := balance(t, b, driver.BalanceParams{Owner: "b", LeaseFor: shardLease, HoldDeadKeys: true})
	if len(ownB.Held) != 0 {
		t.Fatalf("b took %d shards while a, whose session lives, holds them all under a live lease", len(ownB.Held))
	}

	// a's process dies: its store's connections close.
	closed = true
	if err := st.Close(); err != nil {
		t.Fatalf("closing a's store: %v", err)
	}
	died := time.Now()
	for {
		moves, err := sb.Rebalance(t.Context(), "b")
		if err != nil {
			t.Fatalf("Rebalance: %v", err)
		}
		if moves {
			break
		}
		if time.Since(died) > 2*time.Second {
			t.Fatalf("Rebalance still false %s after a's session closed", time.Since(died))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("b saw a's session gone after %s", time.Since(died).Round(time.Millisecond))
	ownB = balance(t, b, driver.BalanceParams{Owner: "b", LeaseFor: shardLease, HoldDeadKeys: true})
	if len(ownB.Held) != ownB.Shards || ownB.Relays != 1 {
		t.Fatalf("b after a's session closed: holds %d of %d shards, %d live relays; want all, 1", len(ownB.Held), ownB.Shards, ownB.Relays)
	}
	for _, l := range ownB.Held {
		i := slices.IndexFunc(ownA.Held, func(x driver.ShardLease) bool { return x.Shard == l.Shard })
		if i >= 0 && l.Epoch <= ownA.Held[i].Epoch {
			t.Errorf("b holds shard %d at epoch %d; want more than a's %d", l.Shard, l.Epoch, ownA.Held[i].Epoch)
		}
	}
	if moves, err := sb.Rebalance(t.Context(), "b"); err != nil || moves {
		t.Errorf("Rebalance after b's Balance: %v, %v; want false (a's membership ended)", moves, err)
	}
	cb := claimOwned(t, b, s.ownedReq("b", claimable(ownB), 10, true))
	wantLabels(t, "b's claim of a's claimed events", cb.Events, "k1", "k2", "k3", "k4", "k5", "k6")
	if err := fx.Store.Ack(t.Context(), driver.AckParams{Lease: ca.Lease, IDs: ids(ca.Events)}); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("a's Ack after b took its claim over: %v; want ErrLeaseLost", err)
	}
	ack(t, fx, cb)
	if st := stats(t, fx); st.Pending() != 0 {
		t.Errorf("Stats after b's ack: %+v; want nothing pending", st)
	}
}

func isSessions(st driver.Store) bool {
	_, ok := st.(driver.Sessions)
	return ok
}
