package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/eventrule"
)

// ErrBadRow: a row of the outbox table breaks the table contract (a producer
// wrote it with plain SQL). Claim never fails on one: the store marks it DEAD
// with the reason, and it holds only its own key.
var ErrBadRow = errors.New("the row breaks the table contract")

// repair is the operator's way out, appended to every reason.
const repair = "; fix the row with SQL, then `outbox dead retry ID`"

// BadRow returns the one-line reason a row breaks the contract, formatted
// as fmt.Errorf does: it wraps ErrBadRow and ends with how to repair the row.
func BadRow(format string, args ...any) error {
	return fmt.Errorf("%w: "+format+repair, append([]any{ErrBadRow}, args...)...)
}

// CheckRow checks what the table contract asks of a stored event beyond its
// column types, by the rules Enqueue applies: a non-empty topic and
// event_type; topic, event_key, event_type, aggregate_type, content_type
// and event_id valid UTF-8 without control characters (U+0000–U+001F,
// U+007F–U+009F) or noncharacters, which CloudEvents excludes from its
// strings (and a transport's headers cannot carry); and
// schema_version ≥ 0. Headers are checked by DecodeHeaders. The error
// wraps ErrBadRow and says what to fix.
func CheckRow(e *outbox.Event) error {
	if e.Topic == "" {
		return BadRow("topic is empty: set it to the destination (NATS subject, Kafka topic, …)")
	}
	if e.Type == "" {
		return BadRow("event_type is empty: set it to what happened, such as 'OrderPaid' (CloudEvents requires a type, and consumers route on it)")
	}
	for _, f := range [...]struct{ column, value string }{{"topic", e.Topic}, {"event_key", e.Key}, {"event_type", e.Type},
		{"aggregate_type", e.AggregateType}, {"content_type", e.ContentType}, {"event_id", e.EventID}} {
		if err := checkText(f.column, f.value); err != nil {
			return err
		}
	}
	if e.SchemaVersion < 0 {
		return BadRow("schema_version is %d: use 0 or a positive version", e.SchemaVersion)
	}
	return nil
}

// checkText refuses what a CloudEvents String cannot hold, by the rule
// Enqueue applies (internal/eventrule): invalid UTF-8, control characters
// and Unicode noncharacters.
func checkText(column, s string) error {
	switch p, r, at := eventrule.CheckText(s); p {
	case eventrule.TextInvalidUTF8:
		return BadRow("%s is not valid UTF-8 (byte %d): write text in UTF-8", column, at)
	case eventrule.TextControl:
		return BadRow("%s has the control character %U at byte %d: remove it (CloudEvents strings exclude U+0000–U+001F and U+007F–U+009F)", column, r, at)
	case eventrule.TextNoncharacter:
		return BadRow("%s has the Unicode noncharacter %U at byte %d: remove it (CloudEvents strings exclude noncharacters)", column, r, at)
	}
	return nil
}

// ScreenClaim is what a Claim does with the events it claimed before it
// returns them: an event of c.Events whose row breaks the contract (bad
// holds the decoding errors by event id, or CheckRow finds one) is buried
// with its reason under c.Lease and recorded in c.Buried, and, when
// holdDeadKeys is set, the later events of its key in the same claim are
// released, as a DEAD event holds them in every later claim. c.Events keeps
// the events to deliver, in their order (they must be in id order). When
// nothing is wrong (the common case) it writes nothing and allocates
// nothing. bury and release are the store's own Bury and Release.
func ScreenClaim(ctx context.Context, c *Claim, bad map[int64]error, holdDeadKeys bool,
	bury func(context.Context, BuryParams) error, release func(context.Context, ReleaseParams) error) error {
	kept, buried, err := screen(ctx, c.Lease, c.Events, bad, holdDeadKeys, bury, release)
	if err != nil {
		return err
	}
	c.Events, c.Buried = kept, buried
	return nil
}

func screen(ctx context.Context, lease Lease, events []outbox.Event, bad map[int64]error, holdDeadKeys bool,
	bury func(context.Context, BuryParams) error, release func(context.Context, ReleaseParams) error) ([]outbox.Event, []Burial, error) {
	reason := func(e *outbox.Event) error {
		if err := bad[e.ID]; err != nil {
			return err
		}
		return CheckRow(e)
	}
	first := -1
	var firstErr error
	for i := range events {
		if firstErr = reason(&events[i]); firstErr != nil {
			first = i
			break
		}
	}
	if first < 0 {
		return events, nil, nil
	}
	var burials []Burial
	var released []int64
	held := map[string]bool{}
	kept := events[:first] // in place: a kept event only moves left
	for i := first; i < len(events); i++ {
		e := &events[i]
		err := firstErr
		if i > first {
			err = reason(e)
		}
		switch {
		case err != nil:
			burials = append(burials, Burial{ID: e.ID, Error: err.Error()})
			if holdDeadKeys && e.Key != "" {
				held[e.Key] = true
			}
		case held[e.Key]:
			released = append(released, e.ID)
		default:
			kept = append(kept, *e)
		}
	}
	if err := bury(ctx, BuryParams{Lease: lease, Burials: burials}); err != nil {
		return nil, nil, fmt.Errorf("burying %d events that break the table contract: %w", len(burials), err)
	}
	if len(released) > 0 {
		if err := release(ctx, ReleaseParams{Lease: lease, IDs: released}); err != nil {
			return nil, nil, fmt.Errorf("releasing %d events held by a row that breaks the table contract: %w", len(released), err)
		}
	}
	if len(kept) == 0 {
		return nil, burials, nil
	}
	return kept, burials, nil
}

// DecodeHeaders parses the headers column, which must hold a JSON object
// whose values are strings ('{}' or empty: no headers). Anything else (an
// array, a string, null, a number as a value, text that is not JSON) is an
// error wrapping ErrBadRow that names what was found, and so is text that
// is not valid UTF-8 and a name or value Enqueue refuses (a name that is
// not an HTTP token, a value with a control character: a transport would
// refuse it, or carry it as another header). A name given twice keeps its
// last value, as PostgreSQL's jsonb keeps it at INSERT.
func DecodeHeaders(s []byte) (map[string]string, error) {
	if len(s) == 0 || string(s) == "{}" {
		return nil, nil
	}
	if !utf8.Valid(s) {
		// json.Unmarshal would put U+FFFD in its place: a value changed
		// on the way (PostgreSQL's jsonb and MySQL's JSON refuse it at
		// INSERT; SQLite's text column takes it).
		return nil, BadRow("headers column is not valid UTF-8 (byte %d): write the header names and values in UTF-8", invalidAt(s))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(s, &raw); err != nil || raw == nil {
		return nil, BadRow("headers column is not a JSON object of strings: it holds %s; write an object such as {\"trace-id\":\"abc\"}", describeJSON(s))
	}
	if len(raw) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		var str string
		if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &str) != nil { // Unmarshal takes null for a string
			return nil, BadRow("headers column is not a JSON object of strings: header %q is %s; quote the value (\"%s\")", k, describeJSON(v), strings.ReplaceAll(clip(string(v)), `"`, `\"`))
		}
		if why := eventrule.CheckHeaderName(k); why != "" {
			return nil, BadRow("headers column: header %q: %s", clip(k), why)
		}
		if why := eventrule.CheckHeaderValue(str); why != "" {
			return nil, BadRow("headers column: header %q: %s", clip(k), why)
		}
		out[k] = str
	}
	return out, nil
}

// invalidAt returns the offset of s's first byte that is not valid UTF-8.
func invalidAt(s []byte) int {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(s)
}

// describeJSON names the kind of JSON text s is, with a clipped excerpt.
func describeJSON(s []byte) string {
	t := strings.TrimSpace(string(s))
	kind := "text that is not JSON"
	if json.Valid(s) {
		switch t[0] {
		case '[':
			kind = "an array"
		case '"':
			kind = "a string"
		case 'n':
			kind = "null"
		case 't', 'f':
			kind = "a boolean"
		case '{':
			kind = "an object"
		default:
			kind = "a number"
		}
	}
	if kind == t {
		return kind
	}
	return fmt.Sprintf("%s (%s)", kind, clip(t))
}

// clip shortens s for a one-line message.
func clip(s string) string {
	const max = 40
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max], "") + "…"
}

// EncodeHeaders returns the JSON object stored in the headers column.
func EncodeHeaders(h map[string]string) string {
	if len(h) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(h) // a map[string]string always marshals
	return string(b)
}

// MaxErrorLen bounds last_error: enough for any broker's message.
const MaxErrorLen = 2000

// CleanError makes an error message safe for a text column: valid UTF-8, no
// NUL bytes, at most MaxErrorLen bytes.
func CleanError(s string) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) > MaxErrorLen {
		s = strings.ToValidUTF8(s[:MaxErrorLen], "")
	}
	return s
}
