package torture_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/outbox-go/outbox/cmd/outbox/internal/torture"
)

// history builds a history of keys a and b with versions 1..n each, all
// committed and delivered once in order.
func history(n int) torture.History {
	h := torture.History{Lease: 2 * time.Second, Applied: map[string]int{}, Client: map[string]torture.Outcome{}}
	seq := int64(0)
	for v := 1; v <= n; v++ {
		for _, k := range []string{"a", "b"} {
			id := k + string(rune('0'+v))
			h.Ledger = append(h.Ledger, torture.LedgerRow{EventID: id, Agg: k, Version: int64(v), Hash: "h" + id})
			seq++
			h.Deliveries = append(h.Deliveries, torture.Delivery{N: seq, EventID: id, Key: k, Agg: k, Version: int64(v), Hash: "h" + id, StreamSeq: uint64(seq), NumDelivered: 1, AtMs: seq * 10})
			h.Applied[id] = 1
			h.Client[id] = torture.Committed
		}
	}
	return h
}

func TestCheckerNamesEachAnomaly(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(h *torture.History)
		want   func(r torture.Report) bool
	}{
		{"clean", func(*torture.History) {}, func(r torture.Report) bool { return r.Safe() && r.Delivered == 8 }},
		{"lost", func(h *torture.History) { h.Deliveries = h.Deliveries[:len(h.Deliveries)-1] },
			func(r torture.Report) bool { return r.Lost == 1 && r.OrderViolations == 0 && !r.Safe() }},
		{"lost in the middle breaks order too", func(h *torture.History) { h.Deliveries = append(h.Deliveries[:2], h.Deliveries[4:]...) },
			func(r torture.Report) bool { return r.Lost == 2 && r.OrderViolations == 2 }},
		{"phantom: never committed", func(h *torture.History) {
			h.Deliveries = append(h.Deliveries, torture.Delivery{N: 99, EventID: "x", Key: "a", Agg: "a", Version: 5, Hash: "hx"})
			h.Client["x"] = torture.RolledBack
		}, func(r torture.Report) bool { return r.Phantom == 1 && r.Lost == 0 }},
		{"phantom: other payload", func(h *torture.History) { h.Deliveries[3].Hash = "forged" },
			func(r torture.Report) bool { return r.Phantom == 1 && r.Lost == 1 }},
		{"order: v2 first-delivered before v1", func(h *torture.History) {
			h.Deliveries[0].N, h.Deliveries[2].N = h.Deliveries[2].N, h.Deliveries[0].N
		}, func(r torture.Report) bool { return r.OrderViolations == 2 && r.Lost == 0 }},
		{"duplicate near a fault", func(h *torture.History) {
			d := h.Deliveries[1]
			d.N, d.AtMs, d.NumDelivered = 100, 5000, 2
			h.Deliveries = append(h.Deliveries, d)
			h.Faults = []torture.FaultRecord{{StartMs: 1000, HealMs: 2000}}
		}, func(r torture.Report) bool {
			return r.Duplicates == 1 && r.DupsNearFaults == 1 && r.Redelivered == 1 && r.Safe()
		}},
		{"duplicate away from faults", func(h *torture.History) {
			d := h.Deliveries[1]
			d.N, d.AtMs = 100, 500_000
			h.Deliveries = append(h.Deliveries, d)
			h.Faults = []torture.FaultRecord{{StartMs: 1000, HealMs: 2000}}
		}, func(r torture.Report) bool { return r.Duplicates == 1 && r.DupsNearFaults == 0 && !r.Safe() }},
		{"double-applied", func(h *torture.History) { h.Applied["a1"] = 2 },
			func(r torture.Report) bool { return r.DoubleApplied == 1 && !r.Safe() }},
		{"not applied", func(h *torture.History) { delete(h.Applied, "a1") },
			func(r torture.Report) bool { return r.NotApplied == 1 && !r.Safe() }},
		{"stale write", func(h *torture.History) {
			h.StaleProbed, h.Stale = true, []torture.StaleWrite{{ID: 7, Op: "DELETE", Holder: "r1", Writer: "r0"}}
		}, func(r torture.Report) bool { return r.StaleWrites == 1 && !r.Safe() }},
		{"unknown commit found in the ledger", func(h *torture.History) { h.Client["a1"] = torture.Unknown },
			func(r torture.Report) bool { return r.UnknownCommits == 1 && r.Safe() }},
		{"client saw a commit the ledger lacks", func(h *torture.History) { h.Client["zz"] = torture.Committed },
			func(r torture.Report) bool { return r.WorkloadErrors == 1 && !r.Safe() }},
		{"ledger versions not 1..N", func(h *torture.History) { h.Ledger[0].Version = 7 },
			func(r torture.Report) bool { return r.WorkloadErrors >= 1 && !r.Safe() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := history(4)
			c.break_(&h)
			r := torture.Check(h)
			if !c.want(r) {
				t.Errorf("unexpected report: %+v", r)
			}
		})
	}
}

func TestPlanIsReproducibleFromItsSeed(t *testing.T) {
	tm := torture.Timing{Lease: 2 * time.Second, WriterTimeout: 1500 * time.Millisecond, Relays: 3}
	kinds := torture.ShortKinds("postgres")
	a := torture.Plan(42, kinds, 2*time.Second, 20*time.Second, tm, false)
	b := torture.Plan(42, kinds, 2*time.Second, 20*time.Second, tm, false)
	c := torture.Plan(43, kinds, 2*time.Second, 20*time.Second, tm, false)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different plans:\n%v\n%v", a, b)
	}
	if reflect.DeepEqual(a, c) {
		t.Fatal("different seeds, same plan")
	}
	if len(a) != len(kinds) {
		t.Fatalf("a single round must keep every fault: %d of %d", len(a), len(kinds))
	}
	for _, f := range a {
		if f.Kind == torture.Stop && f.For <= tm.Lease {
			t.Errorf("a stop must outlast the lease: %v", f)
		}
	}
	soak := torture.Plan(42, torture.SoakKinds("postgres", true, true), 2*time.Second, 10*time.Minute, tm, true)
	if torture.End(soak) > 10*time.Minute || len(soak) < 50 {
		t.Fatalf("a repeating plan must fill the window and stay in it: %d faults ending at %s", len(soak), torture.End(soak))
	}
}
