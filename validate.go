package outbox

import (
	"fmt"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/outbox-go/outbox/internal/eventrule"
)

// Column limits shared by every store.
const (
	MaxTopicLen       = 255      // characters in Topic
	MaxKeyLen         = 255      // characters in Key
	MaxTypeLen        = 255      // characters in Type, AggregateType and ContentType
	MaxHeaderBytes    = 64 << 10 // all header names and values together
	DefaultMaxPayload = 1 << 20  // default Limits.MaxPayload: 1 MiB
)

// Limits bound what Validate accepts.
type Limits struct {
	// MaxPayload is the largest payload in bytes; 0 means DefaultMaxPayload (1 MiB).
	MaxPayload int
}

func (l Limits) maxPayload() int {
	if l.MaxPayload <= 0 {
		return DefaultMaxPayload
	}
	return l.MaxPayload
}

// IsReservedHeader reports whether a transport owns name (compared
// ignoring ASCII case): the union of broker.ReservedHeaders over every
// transport, which Validate refuses in Message.Headers.
func IsReservedHeader(name string) bool {
	_, ok := eventrule.Reserved(eventrule.All, name)
	return ok
}

// Validate checks every message before anything is written. It returns the
// first problem as a *ValidationError.
func Validate(limits Limits, msgs ...Message) error {
	for i := range msgs {
		if err := validateOne(i, limits, &msgs[i]); err != nil {
			return err
		}
	}
	return nil
}

func validateOne(i int, limits Limits, m *Message) error {
	bad := func(field string, err error, fix string) error {
		return &ValidationError{Index: i, Field: field, Err: err, Fix: fix}
	}
	if m.Topic == "" {
		return bad("Topic", ErrEmptyTopic, "set Message.Topic to the destination (Kafka topic, NATS subject, routing key, …)")
	}
	for _, f := range [...]struct {
		name, val string
		max       int
	}{{"Topic", m.Topic, MaxTopicLen}, {"Key", m.Key, MaxKeyLen}, {"Type", m.Type, MaxTypeLen},
		{"AggregateType", m.AggregateType, MaxTypeLen}, {"ContentType", m.ContentType, MaxTypeLen}} {
		switch p, r, at := eventrule.CheckText(f.val); p {
		case eventrule.TextInvalidUTF8:
			return bad(f.name, ErrInvalidText, fmt.Sprintf("byte %d is not valid UTF-8; use valid UTF-8 text", at))
		case eventrule.TextControl:
			return bad(f.name, ErrInvalidText, fmt.Sprintf("it holds the control character %U at byte %d; CloudEvents attributes exclude U+0000–U+001F and U+007F–U+009F (TAB, CR and LF included): remove it", r, at))
		case eventrule.TextNoncharacter:
			return bad(f.name, ErrInvalidText, fmt.Sprintf("it holds the Unicode noncharacter %U at byte %d, which CloudEvents attributes exclude: remove it", r, at))
		}
		if n := utf8.RuneCountInString(f.val); n > f.max {
			return bad(f.name, ErrFieldTooLong, fmt.Sprintf("it has %d characters; keep it to %d", n, f.max))
		}
	}
	if m.Type == "" {
		return bad("Type", ErrEmptyType, `say what happened, e.g. Type: "OrderPaid"; CloudEvents requires a non-empty type, and consumers route on it`)
	}
	if max := limits.maxPayload(); len(m.Payload) > max {
		return bad("Payload", ErrPayloadTooLarge, fmt.Sprintf("it is %d bytes, the limit is %d; store large data elsewhere and send a reference, or raise the store's MaxPayload", len(m.Payload), max))
	}
	if m.EventID != "" {
		if _, err := uuid.Parse(m.EventID); err != nil || len(m.EventID) != 36 {
			return bad("EventID", ErrInvalidEventID, "leave EventID empty for a generated UUIDv7, or give one in the form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx")
		}
	}
	if m.SchemaVersion < 0 {
		return bad("SchemaVersion", ErrInvalidMessage, fmt.Sprintf("it is %d; use 0 (stored as 1) or a positive version", m.SchemaVersion))
	}
	total := 0
	for k, v := range m.Headers {
		total += len(k) + len(v)
		if why := eventrule.CheckHeaderName(k); why != "" {
			return bad(fmt.Sprintf("Headers[%q]", k), ErrInvalidHeader, why)
		}
		if why := eventrule.CheckHeaderValue(v); why != "" {
			return bad(fmt.Sprintf("Headers[%q]", k), ErrInvalidHeader, why)
		}
		if r, ok := eventrule.Reserved(eventrule.All, k); ok {
			return bad(fmt.Sprintf("Headers[%q]", k), ErrReservedHeader, fmt.Sprintf("reserved by %s: %s; %s", r.Owners.Names(), r.Why, r.Fix))
		}
	}
	if total > MaxHeaderBytes {
		return bad("Headers", ErrInvalidHeader, fmt.Sprintf("headers take %d bytes; keep them under %d", total, MaxHeaderBytes))
	}
	return nil
}
