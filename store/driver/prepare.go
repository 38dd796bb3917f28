package driver

import (
	"fmt"
	"hash/fnv"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
)

// Prepare is what every store does before writing: validate msgs (the
// caller's transaction is untouched on an error), fill in defaults (event
// ids, schema version, content type) and run o.Check. It returns new
// messages; msgs is not changed.
func Prepare(o store.Options, msgs []outbox.Message) ([]outbox.Message, error) {
	if err := outbox.Validate(outbox.Limits{MaxPayload: o.MaxPayload}, msgs...); err != nil {
		return nil, err
	}
	out := make([]outbox.Message, len(msgs))
	for i, m := range msgs {
		out[i] = m.Normalized()
	}
	if err := checkAll(o, out); err != nil {
		return nil, err
	}
	return out, nil
}

// checkAll runs o.Check, if set, on msgs (validated and normalized) in
// order and returns the first error as a *outbox.ValidationError whose Index
// is the failing message's position.
func checkAll(o store.Options, msgs []outbox.Message) error {
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

// LockKey is a stable 63-bit number naming a lock for this table, for
// databases whose locks are numbered (PostgreSQL advisory locks).
func LockKey(o store.Options, purpose string) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "outbox:%s:%s.%s", purpose, o.Schema, o.Table)
	return int64(h.Sum64() >> 1)
}
