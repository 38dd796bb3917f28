package torture

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// LedgerRow is one committed business transaction, read back from the
// ledger table that the writer's transaction filled: the committed set,
// whatever the client was told about its COMMIT.
type LedgerRow struct {
	EventID string `json:"event_id"`
	Agg     string `json:"agg"`
	Version int64  `json:"version"`
	Hash    string `json:"hash"`
}

// Delivery is one message the consumer received, in the order received.
type Delivery struct {
	N            int64  `json:"n"` // position in the consumer's history
	EventID      string `json:"event_id"`
	Key          string `json:"key"` // the event key the message carried
	Agg          string `json:"agg"` // from the payload
	Version      int64  `json:"version"`
	Hash         string `json:"hash"`          // of the payload bytes
	StreamSeq    uint64 `json:"stream_seq"`    // broker position
	NumDelivered uint64 `json:"num_delivered"` // > 1: a broker redelivery
	Outcome      string `json:"outcome"`       // inbox: processed, duplicate, failed
	AtMs         int64  `json:"at_ms"`         // since the start of the run
}

// Outcome is what a writer's client saw of a transaction.
type Outcome string

// Client-side outcomes.
const (
	Committed  Outcome = "committed"   // COMMIT returned nil
	RolledBack Outcome = "rolled_back" // rolled back on purpose after enqueueing
	Aborted    Outcome = "aborted"     // failed before COMMIT was sent
	Unknown    Outcome = "unknown"     // COMMIT returned an error: may or may not have committed
)

// FaultRecord is a fault as it happened.
type FaultRecord struct {
	Fault
	StartMs int64  `json:"start_ms"`
	HealMs  int64  `json:"heal_ms"`
	Note    string `json:"note,omitempty"`
}

// StaleWrite is a change to an outbox row by a relay that did not hold the
// row's lease (PostgreSQL only: seen by a trigger that compares the row's
// lease_owner with the writing session's application_name).
type StaleWrite struct {
	ID     int64  `json:"id"`
	Op     string `json:"op"`
	Holder string `json:"holder"`
	Writer string `json:"writer"`
}

// History is everything the checker reads.
type History struct {
	Ledger      []LedgerRow        `json:"ledger"`
	Deliveries  []Delivery         `json:"deliveries"`
	Applied     map[string]int     `json:"-"` // event id → times the consumer's handler committed
	Client      map[string]Outcome `json:"-"` // event id → what the writer saw
	Faults      []FaultRecord      `json:"faults"`
	Stale       []StaleWrite       `json:"stale_writes"`
	StaleProbed bool               `json:"stale_probed"` // whether stale writes were observable
	Lease       time.Duration      `json:"lease"`
}

// Anomaly is one violation, with enough to find it in the history.
type Anomaly struct {
	Kind    string `json:"kind"`
	EventID string `json:"event_id,omitempty"`
	Key     string `json:"key,omitempty"`
	Detail  string `json:"detail"`
}

// Report holds every figure of the checker.
type Report struct {
	Committed       int            `json:"committed"` // ledger rows
	ClientOutcomes  map[string]int `json:"client_outcomes"`
	UnknownCommits  int            `json:"unknown_committed"` // unknown to the client, found in the ledger
	Deliveries      int            `json:"deliveries"`
	Delivered       int            `json:"delivered"` // distinct committed events delivered
	Lost            int            `json:"lost"`
	Phantom         int            `json:"phantom"`
	OrderViolations int            `json:"order_violations"`
	Duplicates      int            `json:"duplicates"`
	DupsNearFaults  int            `json:"duplicates_near_faults"`
	Redelivered     int            `json:"redelivered"` // deliveries the broker flagged as redeliveries
	DoubleApplied   int            `json:"double_applied"`
	NotApplied      int            `json:"not_applied"`
	StaleWrites     int            `json:"stale_writes"`
	StaleProbed     bool           `json:"stale_probed"`
	WorkloadErrors  int            `json:"workload_errors"` // ledger disagrees with what the client saw
	Anomalies       []Anomaly      `json:"anomalies"`       // the first few of each kind
	AnomalyCounts   map[string]int `json:"anomaly_counts"`
}

// NearFault is how long after a fault healed a duplicate still counts as
// caused by it: leases must expire and redeliveries come round.
func NearFault(lease time.Duration) time.Duration { return 6*lease + 15*time.Second }

const maxAnomaliesPerKind = 20

// Check computes the anomalies of a history, with Jepsen's names where
// there is one:
//
//   - lost: a committed event (ledger row) with no delivery of its payload
//     after the final drain;
//   - phantom: a delivered event that never committed, or whose payload
//     hash, key or version differs from the committed one;
//   - order: per key, the first deliveries must be versions 1..N exactly,
//     in that order (the writer locks the aggregate row before enqueueing,
//     so id order is commit order per key);
//   - duplicates: deliveries beyond the first, and how many of them came
//     near a fault (from its start to NearFault after it healed);
//   - double-applied / not-applied: the inbox must apply each delivered
//     event exactly once;
//   - stale writes: a relay changed a row whose lease it did not hold
//     (fencing), where observable;
//   - workload errors: the ledger contradicts the client (a transaction
//     the client saw commit is missing, or a rolled-back one is present),
//     or a key's versions are not 1..N (the workload itself is broken).
func Check(h History) Report {
	r := Report{ClientOutcomes: map[string]int{}, AnomalyCounts: map[string]int{}, StaleProbed: h.StaleProbed}
	add := func(kind, id, key, detail string) {
		r.AnomalyCounts[kind]++
		if r.AnomalyCounts[kind] <= maxAnomaliesPerKind {
			r.Anomalies = append(r.Anomalies, Anomaly{Kind: kind, EventID: id, Key: key, Detail: detail})
		}
	}
	ledger := make(map[string]LedgerRow, len(h.Ledger))
	maxVersion := map[string]int64{}
	versions := map[string][]int64{}
	for _, l := range h.Ledger {
		ledger[l.EventID] = l
		versions[l.Agg] = append(versions[l.Agg], l.Version)
		maxVersion[l.Agg] = max(maxVersion[l.Agg], l.Version)
	}
	r.Committed = len(ledger)
	for key, vs := range versions {
		sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
		for i, v := range vs {
			if v != int64(i+1) {
				r.WorkloadErrors++
				add("workload", "", key, fmt.Sprintf("committed versions of %s are not 1..%d: %v…", key, len(vs), vs[:min(len(vs), 10)]))
				break
			}
		}
	}
	for id, o := range h.Client {
		r.ClientOutcomes[string(o)]++
		_, in := ledger[id]
		switch {
		case o == Committed && !in:
			r.WorkloadErrors++
			add("workload", id, "", "the client saw COMMIT succeed but the ledger has no row")
		case (o == RolledBack || o == Aborted) && in:
			r.WorkloadErrors++
			add("workload", id, "", fmt.Sprintf("the client saw %s but the ledger has the row", o))
		case o == Unknown && in:
			r.UnknownCommits++
		}
	}

	// Deliveries in the order received.
	ds := append([]Delivery(nil), h.Deliveries...)
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].N < ds[j].N })
	r.Deliveries = len(ds)
	first := map[string]bool{}      // event ids delivered at least once
	good := map[string]bool{}       // … of which one delivery matched the ledger
	last := map[string]int64{}      // key → last version first-delivered
	firstSeq := map[string]uint64{} // event id → stream seq of its first delivery
	firstAt := map[string]int64{}   // … and when it came
	for _, d := range ds {
		if d.NumDelivered > 1 {
			r.Redelivered++
		}
		if first[d.EventID] {
			r.Duplicates++
			// The broker redelivering the one message it stored (same
			// stream sequence, delivered again) means the consumer's ack
			// was lost: that happens at the fault that hit the first
			// delivery, and shows only after the consumer's AckWait.
			redelivery := d.NumDelivered > 1 && d.StreamSeq == firstSeq[d.EventID]
			if nearFault(d.AtMs, h.Faults, h.Lease) || (redelivery && nearFault(firstAt[d.EventID], h.Faults, h.Lease)) {
				r.DupsNearFaults++
			} else {
				add("duplicate-away-from-faults", d.EventID, d.Key, fmt.Sprintf("delivery #%d at %s (stream seq %d, delivered %d times) is a duplicate and no fault was near", d.N, ms(d.AtMs), d.StreamSeq, d.NumDelivered))
			}
			continue
		}
		first[d.EventID] = true
		firstSeq[d.EventID], firstAt[d.EventID] = d.StreamSeq, d.AtMs
		l, ok := ledger[d.EventID]
		if !ok {
			r.Phantom++
			add("phantom", d.EventID, d.Key, fmt.Sprintf("delivered (stream seq %d, %s v%d) but never committed (client saw: %s)", d.StreamSeq, d.Agg, d.Version, clientSaw(h.Client, d.EventID)))
			continue
		}
		if d.Hash != l.Hash || d.Key != l.Agg || d.Agg != l.Agg || d.Version != l.Version {
			r.Phantom++
			add("phantom", d.EventID, d.Key, fmt.Sprintf("delivered %s v%d hash %s with key %q; committed %s v%d hash %s", d.Agg, d.Version, short(d.Hash), d.Key, l.Agg, l.Version, short(l.Hash)))
			continue
		}
		r.Delivered++
		good[d.EventID] = true
		want := last[l.Agg] + 1
		if l.Version != want {
			r.OrderViolations++
			add("order", d.EventID, l.Agg, fmt.Sprintf("key %s: version %d delivered first after version %d (expected %d) at stream seq %d", l.Agg, l.Version, last[l.Agg], want, d.StreamSeq))
		}
		last[l.Agg] = max(last[l.Agg], l.Version)
	}
	var lost []LedgerRow
	for id, l := range ledger {
		if !good[id] {
			lost = append(lost, l)
		}
	}
	sort.Slice(lost, func(i, j int) bool {
		if lost[i].Agg != lost[j].Agg {
			return lost[i].Agg < lost[j].Agg
		}
		return lost[i].Version < lost[j].Version
	})
	for _, l := range lost {
		r.Lost++
		add("lost", l.EventID, l.Agg, fmt.Sprintf("committed %s v%d (client saw: %s) was never delivered", l.Agg, l.Version, clientSaw(h.Client, l.EventID)))
	}
	if h.Applied != nil {
		for id, n := range h.Applied {
			if n > 1 {
				r.DoubleApplied += n - 1
				add("double-applied", id, "", fmt.Sprintf("the inbox let the handler commit %d times", n))
			}
		}
		for id := range good {
			if h.Applied[id] == 0 {
				r.NotApplied++
				add("not-applied", id, "", "delivered but the handler never committed")
			}
		}
	}
	r.StaleWrites = len(h.Stale)
	for _, s := range h.Stale {
		add("stale-write", "", "", fmt.Sprintf("%s of row %d by %s while %q held its lease", s.Op, s.ID, s.Writer, s.Holder))
	}
	return r
}

func nearFault(atMs int64, faults []FaultRecord, lease time.Duration) bool {
	grace := NearFault(lease).Milliseconds()
	for _, f := range faults {
		if atMs >= f.StartMs-1000 && atMs <= f.HealMs+grace {
			return true
		}
	}
	return false
}

func clientSaw(c map[string]Outcome, id string) string {
	if o, ok := c[id]; ok {
		return string(o)
	}
	return "nothing: not written by this run"
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func ms(v int64) string { return (time.Duration(v) * time.Millisecond).String() }

// Safe reports whether the safety properties held: nothing lost, nothing
// invented, order kept, every delivered event applied exactly once, no
// stale write, no duplicate away from faults, and a sane workload.
func (r Report) Safe() bool {
	return r.Lost == 0 && r.Phantom == 0 && r.OrderViolations == 0 && r.DoubleApplied == 0 && r.NotApplied == 0 &&
		r.StaleWrites == 0 && r.Duplicates == r.DupsNearFaults && r.WorkloadErrors == 0
}

// Problems lists what failed, for messages.
func (r Report) Problems() []string {
	var p []string
	for _, k := range sortedKeys(r.AnomalyCounts) {
		p = append(p, fmt.Sprintf("%s=%d", k, r.AnomalyCounts[k]))
	}
	return p
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// faultCounts is "kill=2 stop=1 …" in AllKinds order.
func faultCounts(fs []FaultRecord) string {
	n := map[Kind]int{}
	for _, f := range fs {
		n[f.Kind]++
	}
	var parts []string
	for _, k := range AllKinds {
		if n[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, n[k]))
		}
	}
	return strings.Join(parts, " ")
}
