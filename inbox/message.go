package inbox

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Column limits of the inbox and versions tables.
const (
	MaxConsumerLen = 255 // characters in a consumer name
	MaxKeyLen      = 255 // characters in a key given to CheckVersion
	maxTypeLen     = 255 // event_type and event_key are cut to this for the record
)

// Message is an event as a consumer received it. Only EventID is needed for
// deduplication; the rest is for the handler. The helpers in inbox/kafkamsg,
// inbox/natsmsg and inbox/amqpmsg fill it from each client's message.
type Message struct {
	// EventID is the event's stable identity (a UUID, the outbox
	// event_id): the deduplication key. Required.
	EventID string
	// Type says what happened ("OrderPaid").
	Type string
	// Key is the aggregate id (the outbox event_key); empty for unordered
	// events.
	Key string
	// SchemaVersion is the payload's schema version. The helpers report 1
	// when the message carries none, as the outbox stores 1 by default.
	SchemaVersion int
	// Payload is the event's data, byte for byte as enqueued.
	Payload []byte
	// ContentType says how to read Payload, e.g. "application/json".
	ContentType string
	// Headers are the producer's own headers (outbox Message.Headers):
	// transport and CloudEvents headers are not repeated here.
	Headers map[string]string
	// Topic is where the message came from: Kafka topic, NATS subject or
	// AMQP routing key.
	Topic string
	// Source is the CloudEvents source (the producing relay's name).
	Source string
	// AggregateType says what kind of thing Key names ("Order").
	AggregateType string
	// Time is when the event was enqueued, per the producer; zero when
	// the message does not say.
	Time time.Time
	// Extensions are the other CloudEvents attributes the message carried
	// (subject, dataschema, traceparent, …), by attribute name.
	Extensions map[string]string
}

// ParseEventID checks that s is a UUID and returns it in the canonical
// lower-case 36-character form, so the same id written differently
// deduplicates as one. It returns ErrMissingEventID for an empty s and
// ErrInvalidEventID for anything that is not a UUID.
func ParseEventID(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", ErrMissingEventID
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return "", ErrInvalidEventID
	}
	return id.String(), nil
}

// ErrInvalidSchemaVersion is the Err of a *HeaderError for a schema version
// that is not a positive decimal integer.
var ErrInvalidSchemaVersion = errors.New("schema version is not a positive decimal integer")

// ErrInvalidTime is the Err of a *HeaderError for a time that is not RFC 3339.
var ErrInvalidTime = errors.New("time is not an RFC 3339 timestamp")

// ErrInvalidText is the Err of a *HeaderError for a value that is not valid
// UTF-8 or contains NUL.
var ErrInvalidText = errors.New("value is not valid UTF-8 text")

// ParseSchemaVersion parses a schema version header value: a positive
// decimal integer.
func ParseSchemaVersion(s string) (int, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || strings.HasPrefix(s, "+") {
		return 0, ErrInvalidSchemaVersion
	}
	return n, nil
}

// ParseTime parses a CloudEvents time attribute (RFC 3339).
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}, ErrInvalidTime
	}
	return t, nil
}

// checkConsumer validates a consumer name.
func checkConsumer(c string) error {
	if c == "" || !utf8.ValidString(c) || strings.ContainsRune(c, 0) || utf8.RuneCountInString(c) > MaxConsumerLen {
		return fmt.Errorf("%w (got %q)", ErrInvalidConsumer, shorten(c))
	}
	return nil
}

// checkKey validates a CheckVersion key: it must be stored exactly.
func checkKey(k string) error {
	if !utf8.ValidString(k) || strings.ContainsRune(k, 0) || utf8.RuneCountInString(k) > MaxKeyLen {
		return fmt.Errorf("%w (got %q)", ErrInvalidKey, shorten(k))
	}
	return nil
}

// recordText makes an informational value safe for a VARCHAR(255) column:
// valid UTF-8, no NUL, at most maxTypeLen characters. Refusing the message
// for a long type or key would turn a harmless oddity into a poison message.
func recordText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	if utf8.RuneCountInString(s) > maxTypeLen {
		n := 0
		for i := range s {
			if n == maxTypeLen {
				return s[:i]
			}
			n++
		}
	}
	return s
}

func shorten(s string) string {
	if len(s) <= maxShownValue {
		return s
	}
	cut := maxShownValue
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
