package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/store"
)

const statusUsage = `status --db URL [--json] [--check [--max-age 5m]]
       outbox status --db URL --watch [--interval 2s] [--json]

With --watch, a live view redrawn in place until Ctrl-C: pending events, the
net drain rate and the ETA to drain the backlog, the oldest pending age, dead
events and blocked keys; with --json, one JSON object per line.

With --check, exits 3 when the table needs attention, printing one line on
stderr per reason: dead events, keys held by a dead event, expired leases,
or a pending event older than --max-age. Exit 0: healthy; 1: the check could
not run (database unreachable, table missing); 2: bad flags.`

// errCheckFailed is what `status --check` returns when it found a problem
// (exit code exitCheck); the reasons are already printed.
var errCheckFailed = errors.New("status check failed")

// defaultMaxAge is --max-age's default: a relay that runs delivers within
// milliseconds, so a pending event this old means none runs or it is stuck.
const defaultMaxAge = 5 * time.Minute

// statusJSON is the --json shape of `outbox status`; field names are stable.
type statusJSON struct {
	Table                string        `json:"table"`
	New                  int64         `json:"new"`
	Sending              int64         `json:"sending"`
	Retrying             int64         `json:"retrying"`
	Dead                 int64         `json:"dead"`
	Sent                 int64         `json:"sent_kept"`
	ExpiredLeases        int64         `json:"expired_leases"`
	BlockedKeys          int64         `json:"blocked_keys"`
	HeldForGood          int64         `json:"held_for_good"`
	OldestPendingSeconds float64       `json:"oldest_pending_seconds"`
	Sources              []sourceState `json:"sources,omitempty"`  // the log sources (pgcdc, binlog) that ran on the table
	Problems             []string      `json:"problems,omitempty"` // with --check: why it fails
}

func runStatus(ctx context.Context, e env, args []string) error {
	f := newFlags(e, "status", statusUsage)
	asJSON := f.Bool("json", false, "print JSON")
	check := f.Bool("check", false, "exit 3 when events are dead, keys held, leases expired or the oldest pending event is older than --max-age")
	var maxAge time.Duration
	f.durationFlag(&maxAge, "max-age", defaultMaxAge, time.Millisecond, "with --check: the oldest pending event may be this old")
	watch := f.Bool("watch", false, "a live view, redrawn every --interval until Ctrl-C (with --json: one object per line)")
	var interval time.Duration
	f.durationFlag(&interval, "interval", 2*time.Second, 100*time.Millisecond, "with --watch: how often to redraw")
	if err := f.parse(e, args); err != nil {
		return err
	}
	if len(f.posArgs()) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", wire.ErrUsage, f.posArgs()[0])
	}
	if !*check && isSet(f, "max-age") {
		return fmt.Errorf("%w: --max-age applies to --check: add --check", wire.ErrUsage)
	}
	if *watch && *check {
		return fmt.Errorf("%w: --check looks once and sets the exit code; drop --watch (or --check)", wire.ErrUsage)
	}
	if !*watch && isSet(f, "interval") {
		return fmt.Errorf("%w: --interval applies to --watch: add --watch", wire.ErrUsage)
	}
	opts := f.options()
	opts.KeepSent = true // count the archive too
	st, err := f.openExisting(ctx, opts)
	if err != nil {
		return err
	}
	defer st.Close()
	if *watch {
		if err := watchStatus(ctx, e, st, f.qualifiedTable(), wire.Mask(f.db), interval, *asJSON); err != nil {
			return f.storeErr(err)
		}
		return nil
	}
	s, err := st.Stats(ctx)
	if err != nil {
		return f.storeErr(err)
	}
	var problems []string
	if *check {
		problems = checkStats(s, maxAge)
	}
	sources, err := readSources(ctx, f)
	if err != nil {
		// The counts stand without it (the account may lack the
		// privilege to read the log's size, say): name what failed.
		fmt.Fprintf(e.stderr, "outbox status: reading the log sources' positions: %v\n", err)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(statusJSON{f.qualifiedTable(), s.New, s.Sending, s.Retrying, s.Dead, s.Sent, s.ExpiredLeases, s.BlockedKeys, s.HeldForGood, s.OldestPending.Seconds(), sources, problems}); err != nil {
			return err
		}
	} else {
		printStatus(e, f.qualifiedTable(), wire.Mask(f.db), s, sources)
	}
	if len(problems) == 0 {
		return nil
	}
	for _, p := range problems {
		fmt.Fprintf(e.stderr, "outbox status: check failed: %s\n", p)
	}
	return errCheckFailed
}

// checkStats lists what `status --check` fails on, one line each.
func checkStats(s store.Stats, maxAge time.Duration) []string {
	var out []string
	if s.Dead > 0 {
		out = append(out, fmt.Sprintf("%d dead event(s): inspect with `outbox dead list`, then `outbox dead retry` or `outbox dead purge`", s.Dead))
	}
	if s.BlockedKeys > 0 {
		out = append(out, fmt.Sprintf("%d key(s) held by a dead event: their later events wait until it is retried or purged", s.BlockedKeys))
	}
	if s.HeldForGood > 0 {
		out = append(out, heldForGood(s))
	}
	if s.ExpiredLeases > 0 {
		out = append(out, fmt.Sprintf("%d claimed event(s) with an expired lease: a relay died or stalled; a running relay takes them back", s.ExpiredLeases))
	}
	if s.Pending() > 0 && s.OldestPending > maxAge {
		out = append(out, fmt.Sprintf("the oldest pending event is %s old, more than --max-age %s: is a relay running, and can it reach the broker?", s.OldestPending.Round(time.Second), maxAge))
	}
	return out
}

// isSet reports whether the flag name was given on the command line or in
// --config.
func isSet(f *flags, name string) bool {
	set := false
	f.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}

func printStatus(e env, table, db string, s store.Stats, sources []sourceState) {
	w := e.stdout
	fmt.Fprintf(w, "outbox status: table %s in %s\n", table, db)
	fmt.Fprintf(w, "  pending         %d (new %d, sending %d)\n", s.Pending(), s.New, s.Sending)
	fmt.Fprintf(w, "  retrying        %d\n", s.Retrying)
	fmt.Fprintf(w, "  expired leases  %d\n", s.ExpiredLeases)
	fmt.Fprintf(w, "  dead            %d\n", s.Dead)
	fmt.Fprintf(w, "  blocked keys    %d\n", s.BlockedKeys)
	fmt.Fprintf(w, "  held for good   %d\n", s.HeldForGood)
	fmt.Fprintf(w, "  sent (kept)     %d\n", s.Sent)
	fmt.Fprintf(w, "  oldest pending  %s\n", s.OldestPending.Round(time.Millisecond))
	printSources(e, sources)
	switch {
	case s.BlockedKeys > 0:
		fmt.Fprintf(w, "attention: %d key(s) held by dead events: inspect with `outbox dead list`, then `outbox dead retry`\n", s.BlockedKeys)
	case s.Dead > 0:
		fmt.Fprintf(w, "attention: %d dead event(s): `outbox dead list`\n", s.Dead)
	case s.HeldForGood > 0:
		fmt.Fprintf(w, "attention: %s\n", heldForGood(s))
	case s.ExpiredLeases > 0:
		fmt.Fprintln(w, "attention: claims with expired leases: a relay died or stalled; another relay will take them")
	}
}

// heldForGood says why events wait for good and how to free them.
func heldForGood(s store.Stats) string {
	return fmt.Sprintf("%d event(s) held for good by their own next_attempt_at (a year or more ahead, 'infinity', or no time at all): each holds its key; fix the column with SQL (UPDATE … SET next_attempt_at = now())", s.HeldForGood)
}
