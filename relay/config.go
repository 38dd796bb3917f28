package relay

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/outbox-go/outbox/store/driver"
)

// DeadKeyPolicy says what happens to the later events of a key once one of
// its events went DEAD.
type DeadKeyPolicy int

const (
	// HoldKey (the default) keeps the key's later events waiting until an
	// operator requeues or purges the dead one: order is never broken
	// silently. Held keys show in Stats.BlockedKeys and `outbox status`.
	HoldKey DeadKeyPolicy = iota
	// SkipKey lets the key's later events flow past the dead one.
	SkipKey
)

// Config tunes a Relay. Zero values take the documented defaults;
// negative ones are refused by New.
type Config struct {
	// Owner names this relay in leases; default host-pid-random. Must be
	// unique among running relays. A name given here gets "~" and 8
	// random hex digits appended (Relay.Owner says the result), so that a
	// process restarted under the same name is a new owner and waits for
	// the claims of the one that died; a name that ends so already (a
	// supervisor made it unique per process) is kept.
	Owner string
	// BatchSize is the most events claimed at once; default 500. A relay
	// holds at most 2 × Workers × BatchSize events (each worker publishes
	// one batch while the previous one is being settled), and their
	// payloads weigh at most MaxInflightBytes plus one event.
	BatchSize int
	// MaxInflightBytes bounds the payload bytes the relay holds: claimed
	// (or read from a source) and not settled yet; default 64 MiB. A claim
	// starts only while the events held weigh less, and asks the store
	// for at most the bytes left; it always takes at least one event, so
	// an event larger than the rest of the budget goes alone, and the
	// relay holds at most MaxInflightBytes plus one event. Over a
	// source.Source the relay reads no more while it holds the budget
	// (the read already under way comes in on top).
	MaxInflightBytes int64
	// Workers is how many batches one relay has in flight at once (over a
	// source.Source: how many publish calls); default 3, so that the
	// database, the relay and the broker each have work while the others
	// are busy: on 2 cores, 2 to 4 drained a backlog alike and 6
	// slower (BENCHMARKS.md, "Where the drain's CPU goes").
	Workers int
	// LeaseFor is how long a claim holds before other relays may take it
	// back; default 30s. It is renewed while the batch is in flight.
	LeaseFor time.Duration
	// PublishTimeout bounds each publish call (some of a batch's events);
	// default 10s.
	PublishTimeout time.Duration
	// PollInterval is how often an idle relay looks for work without a
	// wake-up; default 500ms. Wake-ups come from the store's Notifier
	// (LISTEN/NOTIFY on PostgreSQL, in-process signals).
	PollInterval time.Duration
	// MaxAttempts is how many failed attempts make an event DEAD; default
	// 25. With the default backoff (1s doubling to a 10 min cap) the 24
	// delays add up to at most ≈ 2.5 hours, about 1.25 hours on average with
	// full jitter: longer than most broker outages, short enough that a
	// truly poisoned event surfaces the same day.
	MaxAttempts int
	// BackoffBase and BackoffMax shape the retry delay: a random duration in
	// [0, min(BackoffMax, BackoffBase·2^(attempt-1))] (full jitter).
	// Defaults 1s and 10m.
	BackoffBase, BackoffMax time.Duration
	// DeadKeys is the policy for keys with a dead event; default HoldKey.
	DeadKeys DeadKeyPolicy
	// DrainTimeout bounds how long Run waits for in-flight publishes after
	// its context ends; unfinished events are released. Default 5s.
	DrainTimeout time.Duration
	// Logger receives state changes (not one line per attempt); default
	// slog.Default().
	Logger *slog.Logger
	// Hooks observe the relay: each implements one or more of the Hook…
	// interfaces (HookClaim, HookPublishStart, HookPublishEnd, HookSettle,
	// HookLease, HookHealth). Default none. New refuses a value that
	// implements none of them (a hook that would never be called).
	Hooks []Hook
}

// DefaultMaxInflightBytes is Config.MaxInflightBytes's default: 64 MiB.
const DefaultMaxInflightBytes = 64 << 20

// BatchReport summarizes one claimed batch.
type BatchReport struct {
	Lease     driver.Lease // the batch's claim
	Claimed   int
	Delivered int           // confirmed by the broker and acked
	Retried   int           // failed, will be retried
	Dead      int           // buried
	Released  int           // held behind a failed event of their key, or not published at stop
	Duration  time.Duration // claim to settle
	LeaseLost bool          // the store refused a write because the lease was gone
}

// WithDefaults returns c with the documented default in every zero field.
func (c Config) WithDefaults() Config {
	if c.Owner == "" {
		c.Owner = defaultOwner()
	}
	if c.BatchSize == 0 {
		c.BatchSize = 500
	}
	if c.Workers == 0 {
		c.Workers = 3
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if c.LeaseFor == 0 {
		c.LeaseFor = 30 * time.Second
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = 10 * time.Second
	}
	if c.PollInterval == 0 {
		c.PollInterval = 500 * time.Millisecond
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 25
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = time.Second
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 10 * time.Minute
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate refuses what WithDefaults left unusable: a negative value is a
// mistake, not a request for the default, so it is named rather than run
// with a setting nobody chose.
func (c Config) validate() error {
	if len(c.Owner) > 64 {
		return fmt.Errorf("relay: Owner %q is longer than 64 characters", c.Owner)
	}
	for _, f := range []struct {
		name string
		neg  bool
	}{
		{"BatchSize", c.BatchSize < 0}, {"Workers", c.Workers < 0}, {"MaxInflightBytes", c.MaxInflightBytes < 0}, {"LeaseFor", c.LeaseFor < 0},
		{"PublishTimeout", c.PublishTimeout < 0}, {"PollInterval", c.PollInterval < 0},
		{"MaxAttempts", c.MaxAttempts < 0}, {"BackoffBase", c.BackoffBase < 0},
		{"BackoffMax", c.BackoffMax < 0}, {"DrainTimeout", c.DrainTimeout < 0},
	} {
		if f.neg {
			return fmt.Errorf("relay: %s must not be negative (0 means the default)", f.name)
		}
	}
	if c.LeaseFor < 100*time.Millisecond {
		return errors.New("relay: LeaseFor must be at least 100ms")
	}
	if c.BackoffMax < c.BackoffBase {
		return errors.New("relay: BackoffMax must not be below BackoffBase")
	}
	for i, h := range c.Hooks {
		if !knownHook(h) {
			return fmt.Errorf("relay: Hooks[%d] (%T) implements none of the Hook interfaces", i, h)
		}
	}
	return nil
}

// incarnation makes a chosen Owner name unique to this process: name~8
// hex digits (the name cut to 55 bytes).
// A process restarted under the same name would otherwise inherit its
// shards at once, while the claims of the process that died are still
// leased, and could publish a key's later events before those claims
// expire and their earlier events go out again.
func incarnation(name string) string {
	if hasIncarnation(name) {
		return name // a supervisor made the name unique per process already
	}
	if len(name) > 55 {
		name = name[:55]
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return name + "~" + hex.EncodeToString(b)
}

// hasIncarnation reports whether name ends in "~" and 8 lower-case hex
// digits.
func hasIncarnation(name string) bool {
	i := len(name) - 9
	if i < 1 || name[i] != '~' {
		return false
	}
	for _, c := range name[i+1:] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func defaultOwner() string {
	host, _ := os.Hostname()
	if len(host) > 32 {
		host = host[:32]
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}
