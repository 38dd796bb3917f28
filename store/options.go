package store

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	outbox "github.com/outbox-go/outbox"
)

// Options are the settings every SQL store shares.
type Options struct {
	// Table is the outbox table's name; default "outbox". The archive of
	// sent events is Table+"_archive", the migration bookkeeping
	// Table+"_migrations", and PostgreSQL's claims Table+"_claims".
	// Lower-case letters, digits and _, not starting with a digit, at
	// most MaxTableName characters.
	Table string
	// Schema is the PostgreSQL schema or MySQL database holding the table;
	// default: the connection's current one. Ignored by SQLite.
	Schema string
	// MaxPayload is the largest payload accepted at enqueue, in bytes;
	// default 1 MiB.
	MaxPayload int
	// KeepSent moves acknowledged events to the archive table as SENT
	// (one statement, no in-place update of the hot table) instead of
	// deleting them; purge them with Purge. Default false: delete.
	KeepSent bool
	// Check is optional extra validation run on every message at enqueue
	// after the built-in checks, before anything is written; e.g.
	// (*eventschema.Registry).Check. It sees each message as it will be
	// stored (EventID set, SchemaVersion at least 1, ContentType set) and
	// must be safe for concurrent use. An error rejects the whole call:
	// nothing is written and the caller's transaction stays usable. It comes
	// back as a *outbox.ValidationError carrying the message's index (a
	// *outbox.ValidationError from Check keeps its Field, Err and Fix; any
	// other error becomes its Err), so errors.Is(err,
	// outbox.ErrInvalidMessage) holds.
	Check func(outbox.Message) error
	// ProbeInterval is how often a store whose Notify channel is open
	// looks for commits that carried no notification (a producer's plain
	// INSERT, from any language; another process's EnqueueTx): PostgreSQL
	// and MySQL read the newest id at the end of the primary key, SQLite
	// its file's data_version. They then wake the relay within about that
	// long. 0 means DefaultProbeInterval (5ms); a negative value turns it
	// off, and the relay finds such commits at its next poll.
	ProbeInterval time.Duration
}

// DefaultProbeInterval is Options.ProbeInterval's default: one cheap query
// every 5 ms per listening relay, measured in BENCHMARKS.md.
const DefaultProbeInterval = 5 * time.Millisecond

// Normalize fills defaults and validates names.
func (o Options) Normalize() (Options, error) {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if err := ValidateName("table", o.Table); err != nil {
		return o, err
	}
	if len(o.Table) > MaxTableName {
		return o, fmt.Errorf("%w: table %q: keep it to %d characters so the derived names (%s_archive, %s_migrations) fit in 63", ErrInvalidName, o.Table, MaxTableName, o.Table, o.Table)
	}
	if o.Schema != "" {
		if err := ValidateName("schema", o.Schema); err != nil {
			return o, err
		}
	}
	if o.MaxPayload <= 0 {
		o.MaxPayload = outbox.DefaultMaxPayload
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = DefaultProbeInterval
	}
	return o, nil
}

// Prepare is what every store does before writing: validate msgs (the
// caller's transaction is untouched on an error), fill in defaults (event
// ids, schema version, content type) and run o.Check. It returns new
// messages; msgs is not changed.
func (o Options) Prepare(msgs []outbox.Message) ([]outbox.Message, error) {
	if err := outbox.Validate(o.Limits(), msgs...); err != nil {
		return nil, err
	}
	out := make([]outbox.Message, len(msgs))
	for i, m := range msgs {
		out[i] = m.Normalized()
	}
	if err := o.CheckAll(out); err != nil {
		return nil, err
	}
	return out, nil
}

// CheckAll runs o.Check, if set, on msgs (validated and normalized) in
// order and returns the first error as a *outbox.ValidationError whose Index
// is the failing message's position.
func (o Options) CheckAll(msgs []outbox.Message) error {
	if o.Check == nil {
		return nil
	}
	for i, m := range msgs {
		err := o.Check(m)
		if err == nil {
			continue
		}
		if ve, ok := err.(*outbox.ValidationError); ok {
			c := *ve // Check's error may be shared; don't write to it
			c.Index = i
			return &c
		}
		return &outbox.ValidationError{Index: i, Field: "Message", Err: err,
			Fix: "the store's Options.Check refused it: fix the message, or the check"}
	}
	return nil
}

// Limits returns the validation limits these options imply.
func (o Options) Limits() outbox.Limits { return outbox.Limits{MaxPayload: o.MaxPayload} }

// LockKey is a stable 63-bit number naming a lock for this table, for
// databases whose locks are numbered (PostgreSQL advisory locks).
func (o Options) LockKey(purpose string) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "outbox:%s:%s.%s", purpose, o.Schema, o.Table)
	return int64(h.Sum64() >> 1)
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
