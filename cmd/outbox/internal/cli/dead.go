package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/store"
)

const deadUsage = `dead list  [--topic T] [--key K] [--after ID] [--limit N] [--json]
       outbox dead show ID [--json | --raw > FILE]
       outbox dead retry ID... | --all | --topic T | --key K (exit 1 when an ID names no DEAD event)
       outbox dead purge --older-than DURATION [--topic T] [--key K] (deletes dead events for good; 0s: all of them)`

func runDead(ctx context.Context, e env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(e.stdout, "Usage: outbox %s\n", deadUsage)
		if len(args) == 0 {
			return fmt.Errorf("%w: say list, show, retry or purge", wire.ErrUsage)
		}
		return nil
	}
	sub, args := args[0], args[1:]
	f := newFlags(e, "dead "+sub, deadUsage)
	// Each subcommand takes only the flags it uses, so a flag that would
	// be ignored (dead show --topic) is refused instead.
	var (
		topic, key      *string
		asJSON, all     *bool
		raw             = new(bool)
		after           int64
		limit           int
		olderThan       time.Duration
		needsIDs, oneID bool
	)
	noString, noBool := "", false
	topic, key, asJSON, all = &noString, &noString, &noBool, &noBool
	switch sub {
	case "list":
		topic = f.String("topic", "", "only events of this topic")
		key = f.String("key", "", "only events of this key")
		f.int64Flag(&after, "after", 0, 0, "ids after this one (paging)")
		f.intFlag(&limit, "limit", 50, 1, 10_000, "at most this many")
		asJSON = f.Bool("json", false, "print JSON (every field, the whole last error)")
	case "show":
		asJSON = f.Bool("json", false, "print JSON (the whole payload; base64 when it is not UTF-8)")
		raw = f.Bool("raw", false, "write only the payload's exact bytes to stdout, which must not be a terminal (e.g. > payload.bin)")
		oneID = true
	case "retry":
		topic = f.String("topic", "", "every dead event of this topic")
		key = f.String("key", "", "every dead event of this key")
		all = f.Bool("all", false, "every dead event")
		needsIDs = true
	case "purge":
		f.durationFlag(&olderThan, "older-than", 0, 0, "dead events created longer ago than this (e.g. 720h; 0s: all); required")
		topic = f.String("topic", "", "only dead events of this topic")
		key = f.String("key", "", "only dead events of this key")
	default:
		return fmt.Errorf("%w: unknown dead command %q: say list, show, retry or purge", wire.ErrUsage, sub)
	}
	if err := f.parse(e, args); err != nil {
		return err
	}
	var ids []int64
	for _, a := range f.posArgs() {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("%w: %q is not an event id (a positive number from `outbox dead list`)", wire.ErrUsage, a)
		}
		ids = append(ids, id)
	}
	switch {
	case oneID && len(ids) != 1:
		return fmt.Errorf("%w: dead show takes one event id", wire.ErrUsage)
	case !oneID && !needsIDs && len(ids) > 0:
		return fmt.Errorf("%w: dead %s takes no event ids (unexpected %q)", wire.ErrUsage, sub, f.posArgs()[0])
	case needsIDs && len(ids) == 0 && !*all && *topic == "" && *key == "":
		return fmt.Errorf("%w: dead retry needs event ids, --topic, --key or --all", wire.ErrUsage)
	case needsIDs && *all && (len(ids) > 0 || *topic != "" || *key != ""):
		return fmt.Errorf("%w: dead retry --all takes no event ids, --topic or --key", wire.ErrUsage)
	case *raw && *asJSON:
		return fmt.Errorf("%w: dead show takes --json or --raw, not both", wire.ErrUsage)
	case *raw && isTerminal(e.stdout):
		return fmt.Errorf("%w: dead show --raw writes the payload's bytes as they are, which could rewrite the terminal: redirect them (outbox dead show %d --raw > payload.bin), or read them escaped without --raw", wire.ErrUsage, ids[0])
	case sub == "purge" && !isSet(f, "older-than"):
		return fmt.Errorf("%w: dead purge needs --older-than (0s purges every dead event)", wire.ErrUsage)
	}
	q := store.DeadQuery{IDs: ids, Topic: *topic, Key: *key, AfterID: after, Limit: limit}
	st, err := f.openExisting(ctx, f.options())
	if err != nil {
		return err
	}
	defer st.Close()
	switch sub {
	case "list":
		recs, err := st.ListDead(ctx, q)
		if err != nil {
			return f.storeErr(err)
		}
		if *asJSON {
			return json.NewEncoder(e.stdout).Encode(toJSON(recs))
		}
		if len(recs) == 0 {
			fmt.Fprintln(e.stdout, "no dead events")
			return nil
		}
		printDeadList(e, recs)
		if len(recs) == limit {
			fmt.Fprintf(e.stdout, "more: outbox dead list --after %d\n", recs[len(recs)-1].ID)
		}
	case "show":
		// A DEAD event is read with a preview of its payload (it is
		// often one too large for the broker); --raw and --json stream
		// the rest. Any other event is read whole.
		r, err := peek(ctx, st, ids[0])
		if err != nil {
			return f.storeErr(err)
		}
		switch {
		case *raw:
			if len(r.Payload) < r.PayloadSize {
				return f.storeErr(store.CopyPayload(ctx, st, r.ID, r.PayloadSize, e.stdout))
			}
			_, err := e.stdout.Write(r.Payload)
			return err
		case *asJSON:
			return f.storeErr(showJSON(ctx, e.stdout, st, r))
		}
		printRecord(e, r)
	case "retry":
		return retryDead(ctx, e, f, st, q, *all)
	case "purge":
		n, err := st.Purge(ctx, store.PurgeRequest{Status: outbox.StatusDead, OlderThan: olderThan, Topic: *topic, Key: *key})
		if err != nil {
			return f.storeErr(err)
		}
		fmt.Fprintf(e.stdout, "purged %d dead event(s)\n", n)
	}
	return nil
}

// errRetryMissed is dead retry by id when some of the ids named no DEAD
// event (exit 1: what was asked for was not done).
var errRetryMissed = errors.New("not every event named was requeued")

// retryDead requeues q's dead events. Ids are looked up first, so that one
// that names no event, or an event that is not DEAD (a typo, a retry run
// twice), is reported by id and fails the command, where the store would
// only count fewer requeued; a selector (--topic, --key, --all) that
// matches nothing is said, and is not a failure (there is nothing to do).
func retryDead(ctx context.Context, e env, f *flags, st store.Store, q store.DeadQuery, all bool) error {
	var missed []string
	if len(q.IDs) > 0 {
		var dead []int64
		for _, id := range q.IDs {
			r, err := st.Get(ctx, id)
			switch {
			case errors.Is(err, store.ErrNotFound):
				missed = append(missed, fmt.Sprintf("event %d does not exist", id))
			case err != nil:
				return f.storeErr(err)
			case r.Status != outbox.StatusDead:
				missed = append(missed, fmt.Sprintf("event %d is %s, not DEAD", id, r.Status))
			case q.Topic != "" && r.Topic != q.Topic:
				missed = append(missed, fmt.Sprintf("event %d is of topic %q, not --topic %q", id, r.Topic, q.Topic))
			case q.Key != "" && r.Key != q.Key:
				missed = append(missed, fmt.Sprintf("event %d is of key %q, not --key %q", id, r.Key, q.Key))
			default:
				dead = append(dead, id)
			}
		}
		q.IDs = dead
	}
	var n int64
	if len(q.IDs) > 0 || len(missed) == 0 {
		var err error
		if n, err = st.RequeueDead(ctx, q); err != nil {
			return f.storeErr(err)
		}
		if len(q.IDs) > 0 && n < int64(len(q.IDs)) {
			// Requeued, purged or skipped by someone else since the look-up.
			missed = append(missed, fmt.Sprintf("%d of the DEAD events were no longer DEAD when requeued", int64(len(q.IDs))-n))
		}
	}
	switch {
	case n > 0:
		fmt.Fprintf(e.stdout, "requeued %d dead event(s); a running relay delivers them next\n", n)
	case len(missed) == 0:
		fmt.Fprintf(e.stdout, "no dead events%s: nothing requeued\n", selectorText(q, all))
	}
	if len(missed) > 0 {
		return fmt.Errorf("%w: %s (see outbox dead list)", errRetryMissed, strings.Join(missed, "; "))
	}
	return nil
}

// selectorText names a retry's --topic and --key, as " of topic \"t\"".
func selectorText(q store.DeadQuery, all bool) string {
	var parts []string
	if q.Topic != "" {
		parts = append(parts, fmt.Sprintf("topic %q", q.Topic))
	}
	if q.Key != "" {
		parts = append(parts, fmt.Sprintf("key %q", q.Key))
	}
	if len(parts) == 0 || all {
		return ""
	}
	return " of " + strings.Join(parts, " and ")
}

// The LAST ERROR column wraps at word boundaries instead of being cut, so
// the reason, which comes after the adapter's prefix, is always shown; an
// error longer than deadErrLines lines ends in a pointer to `dead show`.
const (
	deadErrWidth = 64
	deadErrLines = 6
)

func printDeadList(e env, recs []store.Record) {
	w := e.stdout
	const row = "%-10s %-20s %-20s %-8s %s\n"
	indent := strings.Repeat(" ", 10+1+20+1+20+1+8+1)
	fmt.Fprintf(w, row, "ID", "TOPIC", "KEY", "ATTEMPTS", "LAST ERROR")
	for _, r := range recs {
		lines := wrap(printable(lastError(r)), deadErrWidth)
		if len(lines) > deadErrLines {
			lines = append(lines[:deadErrLines-1], fmt.Sprintf("… (the whole error: outbox dead show %d)", r.ID))
		}
		if len(lines) == 0 {
			lines = []string{""}
		}
		fmt.Fprintf(w, row, strconv.FormatInt(r.ID, 10), clip(printable(r.Topic), 20), clip(printable(r.Key), 20), strconv.Itoa(r.Attempts), lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(w, "%s%s\n", indent, l)
		}
	}
}

// noReason stands for the last error of a dead event that has none: a row
// a producer or an operator wrote as DEAD with plain SQL.
const noReason = "(no reason recorded)"

// lastError is r's last error as dead list and show print it.
func lastError(r store.Record) string {
	if r.LastError == "" && r.Status == outbox.StatusDead {
		return noReason
	}
	return r.LastError
}

// wrap splits s into lines of at most width runes, at spaces where it can.
func wrap(s string, width int) []string {
	var lines []string
	for s != "" {
		r := []rune(s)
		if len(r) <= width {
			lines = append(lines, s)
			break
		}
		cut := width
		for i := width; i > width/2; i-- {
			if r[i] == ' ' {
				cut = i
				break
			}
		}
		lines = append(lines, strings.TrimRight(string(r[:cut]), " "))
		s = strings.TrimLeft(string(r[cut:]), " ")
	}
	return lines
}

// printable escapes control characters, which a plain-SQL producer may have
// put in a topic, key or error, so they cannot rewrite the terminal.
func printable(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

type recordJSON struct {
	ID            int64             `json:"id"`
	EventID       string            `json:"event_id"`
	Topic         string            `json:"topic"`
	Key           string            `json:"event_key"`
	Type          string            `json:"event_type"`
	AggregateType string            `json:"aggregate_type,omitempty"`
	SchemaVersion int               `json:"schema_version"`
	ContentType   string            `json:"content_type"`
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       string            `json:"payload"`
	PayloadBase64 bool              `json:"payload_is_base64,omitempty"`
	PayloadSize   int               `json:"payload_size"` // more than the payload's bytes: dead list gives its first 4 KiB
	Status        string            `json:"status"`
	Attempts      int               `json:"attempts"`
	LastError     string            `json:"last_error,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	NextAttemptAt time.Time         `json:"next_attempt_at"`
}

func toJSON(recs []store.Record) []recordJSON {
	out := make([]recordJSON, 0, len(recs))
	for _, r := range recs {
		j := recordJSON{ID: r.ID, EventID: r.EventID, Topic: r.Topic, Key: r.Key, Type: r.Type, AggregateType: r.AggregateType,
			SchemaVersion: r.SchemaVersion, ContentType: r.ContentType, Headers: r.Headers, Status: string(r.Status),
			Attempts: r.Attempts, LastError: r.LastError, CreatedAt: r.CreatedAt, NextAttemptAt: r.NextAttemptAt, PayloadSize: max(r.PayloadSize, len(r.Payload))}
		if utf8.Valid(r.Payload) {
			j.Payload = string(r.Payload)
		} else {
			j.Payload, j.PayloadBase64 = base64.StdEncoding.EncodeToString(r.Payload), true
		}
		out = append(out, j)
	}
	return out
}

func printRecord(e env, r store.Record) {
	w := e.stdout
	fmt.Fprintf(w, "id              %d\nevent id        %s\nstatus          %s\ntopic           %s\nkey             %s\ntype            %s\n", r.ID, r.EventID, r.Status, printable(r.Topic), printable(r.Key), printable(r.Type))
	if r.AggregateType != "" {
		fmt.Fprintf(w, "aggregate type  %s\n", printable(r.AggregateType))
	}
	fmt.Fprintf(w, "schema version  %d\ncontent type    %s\nattempts        %d\ncreated         %s\n", r.SchemaVersion, printable(r.ContentType), r.Attempts, r.CreatedAt.Format(time.RFC3339))
	if !r.NextAttemptAt.IsZero() {
		fmt.Fprintf(w, "next attempt    %s\n", r.NextAttemptAt.Format(time.RFC3339))
	}
	if r.LastError != "" || r.Status == outbox.StatusDead {
		fmt.Fprintf(w, "last error      %s\n", printable(lastError(r)))
	}
	names := make([]string, 0, len(r.Headers))
	for k := range r.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(w, "header          %s: %s\n", printable(k), printable(r.Headers[k]))
	}
	fmt.Fprintf(w, "payload         %s\n", showPayload(r.ID, r.Payload, r.PayloadSize))
}

// peek reads event id: a DEAD one with the first store.PreviewBytes of its
// payload (ListDead), any other whole (Get).
func peek(ctx context.Context, st store.Store, id int64) (store.Record, error) {
	recs, err := st.ListDead(ctx, store.DeadQuery{IDs: []int64{id}, Limit: 1})
	if err != nil {
		return store.Record{}, err
	}
	if len(recs) == 1 {
		return recs[0], nil
	}
	return st.Get(ctx, id)
}

// Of a payload, dead show prints at most showPayloadMax bytes, and of a
// binary one showPayloadHex bytes in hex; --raw and --json give it whole.
const (
	showPayloadMax = 4096
	showPayloadHex = 64
)

// showPayload is the payload as dead show prints it: text with its control
// characters escaped (a plain-SQL producer may have stored NULs or escape
// sequences, which must not reach the terminal), kept to showPayloadMax
// bytes; binary (not UTF-8) as the hex of its first bytes. What is left out
// is counted, with the command that prints it whole.
func showPayload(id int64, p []byte, size int) string {
	whole := fmt.Sprintf("outbox dead show %d --raw > payload.bin (the exact bytes) or --json", id)
	if size > len(p) {
		// a prefix: it may end inside a character
		for i := 0; i < utf8.UTFMax && len(p) > 0 && !utf8.FullRune(p[lastStart(p):]); i++ {
			p = p[:lastStart(p)]
		}
	}
	size = max(size, len(p))
	if !utf8.Valid(p) {
		n := min(len(p), showPayloadHex)
		more := ""
		if n < size {
			more = " …"
		}
		return fmt.Sprintf("(%d bytes, binary; the first %d in hex: % x%s; the whole payload: %s)", size, n, p[:n], more, whole)
	}
	shown := p
	if len(p) > showPayloadMax {
		cut := showPayloadMax
		for cut > 0 && !utf8.RuneStart(p[cut]) {
			cut--
		}
		shown = p[:cut]
	}
	var b strings.Builder
	for _, r := range string(shown) {
		switch {
		case r == '\n': // keep a pretty-printed payload's lines, indented under the value
			b.WriteString("\n" + strings.Repeat(" ", 16))
		case r == '\t':
			b.WriteRune(r)
		case unicode.IsControl(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	if len(shown) < size {
		fmt.Fprintf(&b, " … (%d of %d bytes not shown; the whole payload: %s)", size-len(shown), size, whole)
	}
	return b.String()
}

// lastStart is the index of the start of p's last character.
func lastStart(p []byte) int {
	i := len(p) - 1
	for i > 0 && !utf8.RuneStart(p[i]) {
		i--
	}
	return max(i, 0)
}

func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
