package torture

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// Kind names a fault.
type Kind string

// The faults. Each one heals by itself (a killed relay is restarted, a
// stopped one continued, a link's latency or pause lifted, a server
// restarted); the run measures how long the system takes to recover.
const (
	// Kill SIGKILLs a relay process, preferably while it holds a claimed
	// batch, and starts a new one after Fault.For.
	Kill Kind = "kill"
	// Leave stops a relay process gracefully (SIGTERM: it settles its
	// work and gives its shards up) and starts a new one after Fault.For,
	// which joins: relays leaving and joining mid-drain, so shards change
	// hands while keys are in flight.
	Leave Kind = "leave"
	// Stop SIGSTOPs a relay process, preferably mid-batch, for Fault.For
	// (longer than the lease), then SIGCONTs it: a stale relay waking up.
	Stop Kind = "stop"
	// PGTerminate terminates the PostgreSQL backends of the relays and the
	// writers (pg_terminate_backend).
	PGTerminate Kind = "pg-terminate"
	// PGRestart restarts the PostgreSQL cluster (pg_ctlcluster … restart).
	// It hurts every other user of the server, so it is for soaks only.
	PGRestart Kind = "pg-restart"
	// DBReset resets every relay↔database connection through the proxy.
	DBReset Kind = "db-reset"
	// DBLatency delays every chunk on the relay↔database link by
	// Fault.Latency (beyond the lease) for Fault.For.
	DBLatency Kind = "db-latency"
	// CommitTimeout pauses the writer↔database link for Fault.For, longer
	// than the writers' deadline, so COMMITs time out with their outcome
	// unknown to the client; the ledger tells what committed.
	CommitTimeout Kind = "commit-timeout"
	// BrokerReset resets each relay↔broker connection right after it
	// forwarded a publish, for Fault.For: the message reached the broker,
	// the confirmation is lost.
	BrokerReset Kind = "broker-reset"
	// BrokerBlackhole pauses the relay↔broker link for Fault.For, then
	// resets it: publishes in flight are lost.
	BrokerBlackhole Kind = "broker-blackhole"
	// BrokerLatency delays the relay↔broker link by Fault.Latency for
	// Fault.For.
	BrokerLatency Kind = "broker-latency"
	// BrokerRestart stops the broker for Fault.For and starts it again on
	// the same port and storage (embedded broker only).
	BrokerRestart Kind = "broker-restart"
)

// AllKinds lists every fault kind, in the order of the summary line.
var AllKinds = []Kind{Kill, Leave, Stop, PGTerminate, PGRestart, DBReset, DBLatency, CommitTimeout, BrokerReset, BrokerBlackhole, BrokerLatency, BrokerRestart}

// ParseKinds parses a comma-separated list of kinds.
func ParseKinds(s string) ([]Kind, error) {
	var out []Kind
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		ok := false
		for _, k := range AllKinds {
			if string(k) == f {
				out = append(out, k)
				ok = true
			}
		}
		if !ok {
			return nil, fmt.Errorf("unknown fault %q; known: %s", f, kindList(AllKinds))
		}
	}
	return out, nil
}

func kindList(ks []Kind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ",")
}

// Fault is one scheduled fault.
type Fault struct {
	At      time.Duration `json:"at_ns"`                // from when events first flow; not before
	Kind    Kind          `json:"kind"`                 //
	Relay   int           `json:"relay"`                // target relay for Kill and Stop
	For     time.Duration `json:"for_ns"`               // how long it lasts before it heals
	Latency time.Duration `json:"latency_ns,omitempty"` // for the latency faults
}

func (f Fault) String() string {
	s := fmt.Sprintf("%s@%s", f.Kind, f.At.Round(100*time.Millisecond))
	switch f.Kind {
	case Kill, Leave, Stop:
		s += fmt.Sprintf(" relay %d", f.Relay)
	}
	if f.For > 0 {
		s += fmt.Sprintf(" for %s", f.For.Round(100*time.Millisecond))
	}
	if f.Latency > 0 {
		s += fmt.Sprintf(" latency %s", f.Latency.Round(time.Millisecond))
	}
	return s
}

// Applicable reports whether kind can be injected on this store, and why
// not.
func Applicable(k Kind, storeKind string, embeddedBroker bool) (bool, string) {
	switch k {
	case PGTerminate, PGRestart:
		if storeKind != "postgres" {
			return false, "PostgreSQL only"
		}
	case DBReset, DBLatency, CommitTimeout:
		if storeKind == "sqlite" {
			return false, "SQLite has no network link"
		}
	case BrokerRestart:
		if !embeddedBroker {
			return false, "needs the embedded broker (run without --broker)"
		}
	}
	return true, ""
}

// ShortKinds is the modest schedule of the CI matrix for a store: a few
// SIGKILLs, a SIGSTOP longer than the lease, backend terminations on
// PostgreSQL, one broker connection reset after a publish, COMMIT timeouts
// and latency beyond the lease on the database link where there is one.
func ShortKinds(storeKind string) []Kind {
	switch storeKind {
	case "postgres":
		return []Kind{Kill, Stop, PGTerminate, PGTerminate, BrokerReset, CommitTimeout, Kill, DBLatency}
	case "mysql":
		return []Kind{Kill, Stop, DBReset, BrokerReset, CommitTimeout, Kill, DBLatency}
	default:
		return []Kind{Kill, Stop, BrokerReset, Kill, BrokerBlackhole}
	}
}

// SoakKinds is every fault that applies; pg-restart only when asked for.
func SoakKinds(storeKind string, embeddedBroker, pgRestart bool) []Kind {
	var out []Kind
	for _, k := range AllKinds {
		if ok, _ := Applicable(k, storeKind, embeddedBroker); !ok {
			continue
		}
		if k == PGRestart && !pgRestart {
			continue
		}
		out = append(out, k)
	}
	return out
}

// Timing are the durations a plan draws from.
type Timing struct {
	Lease         time.Duration // the relays' lease
	WriterTimeout time.Duration // the writers' per-transaction deadline
	Relays        int
}

// Plan is the seeded schedule: kinds in a random order, one after another
// from from on, with random gaps and durations. With repeat it cycles
// through them again while they fit before until; without, it keeps every
// kind even past until (see End). The same seed and arguments give the
// same plan.
func Plan(seed uint64, kinds []Kind, from, until time.Duration, tm Timing, repeat bool) []Fault {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	var plan []Fault
	at := from
	for round := 0; len(kinds) > 0; round++ {
		order := append([]Kind(nil), kinds...)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		added := false
		for _, k := range order {
			f := Fault{At: at, Kind: k, Relay: rng.IntN(max(tm.Relays, 1))}
			switch k {
			case Kill, Leave:
				f.For = between(300*time.Millisecond, time.Second)
			case Stop:
				f.For = between(tm.Lease*5/4, tm.Lease*2)
			case DBLatency:
				f.For = between(2*time.Second, 3*time.Second)
				f.Latency = tm.Lease + 500*time.Millisecond
			case CommitTimeout:
				f.For = tm.WriterTimeout + between(500*time.Millisecond, time.Second)
			case BrokerReset:
				f.For = time.Second
			case BrokerBlackhole:
				f.For = between(time.Second, 2*time.Second)
			case BrokerLatency:
				f.For = between(2*time.Second, 4*time.Second)
				f.Latency = tm.Lease + 500*time.Millisecond
			case BrokerRestart:
				f.For = between(time.Second, 3*time.Second)
			}
			// Budget: the fault itself plus up to a second of waiting for
			// a relay to be mid-batch. A repeating plan stops at until; a
			// single round keeps every fault (the run lasts long enough).
			end := at + f.For + time.Second
			if repeat && end > until {
				continue
			}
			plan = append(plan, f)
			added = true
			at = end + between(500*time.Millisecond, 1500*time.Millisecond)
		}
		if !repeat || !added {
			break
		}
	}
	sort.SliceStable(plan, func(i, j int) bool { return plan[i].At < plan[j].At })
	return plan
}

// End is when the last fault of plan heals at the latest.
func End(plan []Fault) time.Duration {
	var end time.Duration
	for _, f := range plan {
		end = max(end, f.At+f.For+time.Second)
	}
	return end
}
