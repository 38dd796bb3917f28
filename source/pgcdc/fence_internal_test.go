package pgcdc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/outbox-go/outbox/source"
)

// A holder that stalled past its lease (A) and reconnects on waking must
// not terminate the walsender of the process that took the lease over
// (B): ensureSlot checks the lease, in the transaction that terminates a
// walsender, and A stops with source.ErrFenced while B streams on.
func TestStaleHolderLeavesTheNewStreamAlone(t *testing.T) {
	ctx, pool, table, drop := internalFixture(t, "cdc_fence_")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := Config{Table: table, LeaseFor: 5 * time.Second, Heartbeat: -1, Logger: quiet}
	a, err := New(pool, withOwner(cfg, "holder-a"))
	if err != nil {
		t.Fatal(err)
	}
	drop(a.cfg)
	if err := Setup(ctx, pool, a.cfg); err != nil {
		t.Fatal(err)
	}

	// A takes the lease and streams, then stalls past its lease (it renews
	// nothing; its lease is made to expire).
	if err := a.acquireLease(ctx); err != nil {
		t.Fatal(err)
	}
	aConn, err := a.connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer aConn.Close(context.Background())
	// the stall outlasts the lease
	if _, err := pool.Exec(ctx, "UPDATE "+a.n.state+" SET lease_until = now() - interval '1 second' WHERE owner = 'holder-a'"); err != nil {
		t.Fatal(err)
	}

	// B takes the lease over once it expired, ends A's walsender and streams.
	bSrc, err := New(pool, withOwner(cfg, "holder-b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := bSrc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer bSrc.Close()
	if bSrc.Epoch() <= a.epoch {
		t.Fatalf("B's epoch %d is not above A's %d", bSrc.Epoch(), a.epoch)
	}
	var bPID int32
	deadline := time.Now().Add(20 * time.Second)
	for {
		si, err := readSlot(ctx, pool, a.cfg.Slot)
		if err != nil {
			t.Fatal(err)
		}
		if si.active && uint32(si.activePID) != aConn.PID() {
			bPID = si.activePID
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B is not streaming the slot 20s after taking the lease (slot %+v, A's walsender %d)", si, aConn.PID())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A wakes, finds its stream gone and reconnects.
	_, err = a.connect(ctx)
	if !errors.Is(err, source.ErrFenced) {
		t.Fatalf("the stale holder's reconnect returned %v, want source.ErrFenced", err)
	}
	time.Sleep(300 * time.Millisecond)
	si, err := readSlot(ctx, pool, a.cfg.Slot)
	if err != nil {
		t.Fatal(err)
	}
	if !si.active || si.activePID != bPID {
		t.Fatalf("B's walsender %d no longer streams the slot after the stale holder woke (slot %+v)", bPID, si)
	}
}

func withOwner(c Config, owner string) Config {
	c.Owner = owner
	return c
}
