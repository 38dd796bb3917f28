package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/outbox-go/outbox/internal/redact"
	"github.com/outbox-go/outbox/store"
)

// `outbox status --watch`: a live view, redrawn in place on a terminal.
//
// Each tick reads the backlog at a cost that does not grow with it
// (store.BacklogReader: pending by id span, the oldest age, dead), so a
// short --interval is cheap even over millions of rows. The exact counts
// (Stats: blocked keys, retrying, expired leases), which read every row,
// are refreshed only when the last such query took at most a tenth of the
// time since: on a large table they are older, and the view says how old.

// watchWindow is how far back the rates look.
const watchWindow = time.Minute

// reading is one tick of the light query.
type reading struct {
	at            time.Time
	pending, dead int64
	oldest        time.Duration
	deadAtLeast   bool // dead is store.DeadCap, the most Backlog counts
}

// watchJSON is one line of `status --watch --json`; field names are stable.
type watchJSON struct {
	Time                 time.Time `json:"time"`
	Table                string    `json:"table"`
	Pending              int64     `json:"pending"` // estimated by id span (exact without gaps)
	OldestPendingSeconds float64   `json:"oldest_pending_seconds"`
	Dead                 int64     `json:"dead"`
	// DeadAtLeast: Dead is the most the backlog query counts
	// (store.DeadCap); Exact.Dead has the last exact count.
	DeadAtLeast bool `json:"dead_at_least"`
	// NetDrainPerSecond is how fast the backlog shrinks (delivered minus
	// enqueued) over the last minute; negative when it grows, null until
	// two readings exist.
	NetDrainPerSecond *float64 `json:"net_drain_per_second"`
	// ETASeconds is pending over the net drain rate; null when the backlog
	// is not shrinking.
	ETASeconds *float64 `json:"eta_seconds"`
	// DeadPerMinute is how fast events go DEAD over the last minute; null
	// until two readings exist.
	DeadPerMinute *float64 `json:"dead_per_minute"`
	// Exact holds the last exact counts and ExactAgeSeconds their age.
	Exact           *statusJSON `json:"exact"`
	ExactAgeSeconds float64     `json:"exact_age_seconds"`
	Error           string      `json:"error,omitempty"` // this tick's query failed; the other fields are the last known
}

type watcher struct {
	e        env
	st       store.Store
	backlog  store.BacklogReader // nil: Stats every tick
	table    string
	db       string
	interval time.Duration
	asJSON   bool
	tty      bool

	history  []reading
	exact    store.Stats
	exactAt  time.Time
	exactDur time.Duration
	frames   int
}

func watchStatus(ctx context.Context, e env, st store.Store, table, db string, interval time.Duration, asJSON bool) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	w := &watcher{e: e, st: st, table: table, db: db, interval: interval, asJSON: asJSON, tty: isTerminal(e.stdout)}
	if br, ok := st.(store.BacklogReader); ok {
		w.backlog = br
	}
	t := time.NewTicker(interval)
	defer t.Stop()
loop:
	for {
		err := w.tick(ctx)
		if ctx.Err() != nil {
			break
		}
		if err != nil && w.frames == 0 {
			return err // the first look failed: a missing table, a wrong URL
		}
		w.draw(err)
		select {
		case <-ctx.Done():
			break loop
		case <-t.C:
		}
	}
	if w.tty && !w.asJSON {
		fmt.Fprintln(e.stdout)
	}
	return nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// tick takes one reading, and the exact counts when they are due.
func (w *watcher) tick(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, max(w.interval, 5*time.Second))
	defer cancel()
	now := time.Now()
	if w.backlog == nil || w.exactAt.IsZero() || now.Sub(w.exactAt) >= max(w.interval, 10*w.exactDur) {
		s, err := w.st.Stats(qctx)
		if err != nil {
			return err
		}
		w.exact, w.exactAt, w.exactDur = s, now, time.Since(now)
		if w.backlog == nil {
			w.add(reading{at: now, pending: s.Pending(), dead: s.Dead, oldest: s.OldestPending})
			return nil
		}
	}
	b, err := w.backlog.Backlog(qctx)
	if err != nil {
		return err
	}
	w.add(reading{at: now, pending: b.Pending, dead: b.Dead, oldest: b.OldestPendingAge, deadAtLeast: b.Dead >= store.DeadCap})
	return nil
}

func (w *watcher) add(r reading) {
	w.history = append(w.history, r)
	for len(w.history) > 2 && r.at.Sub(w.history[0].at) > watchWindow {
		w.history = w.history[1:]
	}
}

// rates returns the net drain per second over the window, the time to
// drain at that rate (nil when not shrinking) and the dead per minute.
func (w *watcher) rates() (drain, eta, deadPerMin *float64) {
	if len(w.history) < 2 {
		return nil, nil, nil
	}
	o, n := w.history[0], w.history[len(w.history)-1]
	dt := n.at.Sub(o.at).Seconds()
	if dt <= 0 {
		return nil, nil, nil
	}
	d := float64(o.pending-n.pending) / dt
	drain = &d
	if !o.deadAtLeast && !n.deadAtLeast { // a capped count has no rate
		dm := max(float64(n.dead-o.dead), 0) / dt * 60
		deadPerMin = &dm
	}
	switch {
	case n.pending == 0:
		z := 0.0
		eta = &z
	case d > 0:
		e := float64(n.pending) / d
		eta = &e
	}
	return drain, eta, deadPerMin
}

func (w *watcher) draw(tickErr error) {
	w.frames++
	var last reading
	if n := len(w.history); n > 0 {
		last = w.history[n-1]
	}
	drain, eta, deadPerMin := w.rates()
	errText := ""
	if tickErr != nil {
		errText = redact.Text(tickErr.Error())
	}
	if w.asJSON {
		s := w.exact
		line := watchJSON{Time: time.Now().UTC(), Table: w.table, Pending: last.pending, OldestPendingSeconds: last.oldest.Seconds(), Dead: last.dead, DeadAtLeast: last.deadAtLeast,
			NetDrainPerSecond: drain, ETASeconds: eta, DeadPerMinute: deadPerMin, ExactAgeSeconds: time.Since(w.exactAt).Seconds(), Error: errText,
			Exact: &statusJSON{w.table, s.New, s.Sending, s.Retrying, s.Dead, s.Sent, s.ExpiredLeases, s.BlockedKeys, s.HeldForGood, s.OldestPending.Seconds(), nil, nil}}
		_ = json.NewEncoder(w.e.stdout).Encode(line) // one object per line
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "outbox status --watch: table %s in %s · every %s · %s · Ctrl-C to stop\n", w.table, w.db, w.interval, time.Now().Format("15:04:05"))
	rate := "measuring…"
	switch {
	case drain == nil:
	case *drain > 0:
		rate = fmt.Sprintf("draining %s/s net", num(*drain))
	case *drain < 0:
		rate = fmt.Sprintf("growing %s/s net", num(-*drain))
	default:
		rate = "steady"
	}
	etaText := "not draining"
	switch {
	case last.pending == 0:
		etaText = "drained"
	case eta != nil:
		etaText = "ETA " + roundDur(time.Duration(*eta*float64(time.Second)))
	case drain == nil:
		etaText = ""
	}
	fmt.Fprintf(&b, "  pending         %-10d %s  %s\n", last.pending, rate, etaText)
	fmt.Fprintf(&b, "  oldest pending  %s\n", roundDur(last.oldest))
	deadRate := ""
	if deadPerMin != nil && *deadPerMin > 0 {
		deadRate = fmt.Sprintf("+%s/min", num(*deadPerMin))
	}
	if last.deadAtLeast {
		deadRate = fmt.Sprintf("(at least; exact count %d from %s ago)", w.exact.Dead, roundDur(time.Since(w.exactAt)))
		fmt.Fprintf(&b, "  dead            ≥%-9d %s\n", last.dead, deadRate)
	} else {
		fmt.Fprintf(&b, "  dead            %-10d %s\n", last.dead, deadRate)
	}
	age := roundDur(time.Since(w.exactAt))
	fmt.Fprintf(&b, "  blocked keys    %-10d (exact counts from %s ago)\n", w.exact.BlockedKeys, age)
	fmt.Fprintf(&b, "  retrying        %d\n", w.exact.Retrying)
	fmt.Fprintf(&b, "  expired leases  %d\n", w.exact.ExpiredLeases)
	fmt.Fprintf(&b, "  new / sending   %d / %d\n", w.exact.New, w.exact.Sending)
	if errText != "" {
		fmt.Fprintf(&b, "  last query failed (showing the last known figures): %s\n", printable(errText))
	}
	frame := b.String()
	if w.tty {
		// Home, then each line cleared to its end, then the rest of the
		// screen: redrawn in place without a flicker.
		home := "\033[H"
		if w.frames == 1 {
			home = "\033[2J\033[H"
		}
		fmt.Fprint(w.e.stdout, home+strings.ReplaceAll(frame, "\n", "\033[K\n")+"\033[J")
		return
	}
	if w.frames > 1 {
		fmt.Fprintln(w.e.stdout)
	}
	fmt.Fprint(w.e.stdout, frame)
}

// num shows a rate with sensible precision.
func num(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func roundDur(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
