package outbox

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Column limits shared by every store.
const (
	MaxTopicLen        = 255      // characters in Topic
	MaxKeyLen          = 255      // characters in Key
	MaxTypeLen         = 255      // characters in Type, AggregateType and ContentType
	MaxHeaderBytes     = 64 << 10 // all header names and values together
	DefaultMaxPayload  = 1 << 20  // default Limits.MaxPayload: 1 MiB
	maxHeaderNameBytes = 255
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

// reservedHeaderPrefixes are header names the transports own: a user header
// must never override them (lower-case, compared case-insensitively).
var reservedHeaderPrefixes = []string{"nats-", "ce_", "ce-", "x-", "cloudevents:", "cloudevents_", "webhook-", "content-type", "kafka_", "amqp"}

// IsReservedHeader reports whether name belongs to a transport.
func IsReservedHeader(name string) bool {
	n := strings.ToLower(name)
	for _, p := range reservedHeaderPrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
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
	for _, f := range []struct {
		name, val string
		max       int
	}{{"Topic", m.Topic, MaxTopicLen}, {"Key", m.Key, MaxKeyLen}, {"Type", m.Type, MaxTypeLen},
		{"AggregateType", m.AggregateType, MaxTypeLen}, {"ContentType", m.ContentType, MaxTypeLen}} {
		if !utf8.ValidString(f.val) || strings.ContainsRune(f.val, 0) {
			return bad(f.name, ErrInvalidText, "use valid UTF-8 without NUL bytes")
		}
		if n := utf8.RuneCountInString(f.val); n > f.max {
			return bad(f.name, ErrFieldTooLong, fmt.Sprintf("it has %d characters; keep it to %d", n, f.max))
		}
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
		return bad("SchemaVersion", ErrInvalidMessage, "use 0 (stored as 1) or a positive version")
	}
	total := 0
	for k, v := range m.Headers {
		field := fmt.Sprintf("Headers[%q]", k)
		total += len(k) + len(v)
		switch {
		case k == "":
			return bad("Headers", ErrInvalidHeader, "header names must not be empty")
		case len(k) > maxHeaderNameBytes:
			return bad(field, ErrInvalidHeader, fmt.Sprintf("header names are at most %d bytes", maxHeaderNameBytes))
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return bad(field, ErrInvalidHeader, "header names and values must be valid UTF-8; base64-encode binary values")
		case strings.ContainsAny(k, "\r\n\x00") || strings.ContainsAny(v, "\r\n\x00"):
			return bad(field, ErrInvalidHeader, "header names and values must not contain CR, LF or NUL")
		case strings.ContainsAny(k, " \t:"):
			return bad(field, ErrInvalidHeader, "header names must not contain spaces, tabs or colons")
		case IsReservedHeader(k):
			return bad(field, ErrReservedHeader, "names starting with Nats-, ce_, ce-, x-, webhook-, kafka_, amqp or cloudEvents belong to the transports; choose another name")
		}
	}
	if total > MaxHeaderBytes {
		return bad("Headers", ErrInvalidHeader, fmt.Sprintf("headers take %d bytes; keep them under %d", total, MaxHeaderBytes))
	}
	return nil
}
