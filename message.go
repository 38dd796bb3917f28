package outbox

import (
	"time"

	"github.com/google/uuid"
)

// Status is the delivery state of a stored event (the seeds' state machine).
type Status string

// The states an event moves through: NEW → SENDING → SENT, or DEAD.
const (
	StatusNew     Status = "NEW"     // committed, waiting for a relay
	StatusSending Status = "SENDING" // claimed by a relay under a lease
	StatusSent    Status = "SENT"    // the broker confirmed it (kept only when retention is on)
	StatusDead    Status = "DEAD"    // permanently failed or out of attempts; needs an operator
)

// DefaultContentType is the content type of a Message that names none.
const DefaultContentType = "application/json"

// Message is one event to deliver. Topic and Type are required. Text fields
// are valid UTF-8 without control characters (CloudEvents strings).
type Message struct {
	// EventID is the stable identity consumers deduplicate on. A UUIDv7 is
	// generated when empty; a given one must be a UUID.
	EventID string
	// Topic is the destination: Kafka topic, NATS subject, AMQP routing key,
	// Redis stream or MQTT topic. Required, at most 255 characters.
	Topic string
	// Key is the aggregate id: events with the same Key are delivered in
	// order. Empty means unordered. At most 255 characters.
	Key string
	// Type says what happened ("OrderPaid"): the CloudEvents type, which
	// CloudEvents requires. Required, at most 255 characters.
	Type string
	// AggregateType says to what kind of thing it happened ("Order").
	AggregateType string
	// SchemaVersion is the payload's schema version; 0 is stored as 1.
	SchemaVersion int
	// Payload is delivered byte for byte. At most Limits.MaxPayload bytes.
	Payload []byte
	// ContentType says how to read Payload; default application/json.
	ContentType string
	// Headers are delivered as message headers, names and values unchanged.
	// Names are HTTP tokens (letters, digits, !#$%&'*+-.^_`|~); values
	// hold no control characters and no leading or trailing space. Names a
	// transport owns (Content-Type, ce-*, Nats-*, Status, …; see
	// IsReservedHeader and broker.ReservedHeaders) are refused.
	Headers map[string]string
	// AvailableAt delays delivery until then; zero means now. A delayed
	// keyed event holds the later events of its key.
	AvailableAt time.Time
}

// Event is a committed Message as the relay and the brokers see it.
type Event struct {
	// ID is the row id: the order of events within a key.
	ID int64
	Message
	// Attempts counts the failed delivery attempts so far.
	Attempts int
	// CreatedAt is when the event was enqueued (database clock).
	CreatedAt time.Time
}

// NewEventID returns a new UUIDv7 as a string: time-ordered, so indexes on
// event_id stay compact.
func NewEventID() string {
	id, err := uuid.NewV7()
	if err != nil { // only when the system's random source fails
		return uuid.NewString()
	}
	return id.String()
}

// Normalized returns m with defaults filled in: an EventID, SchemaVersion 1,
// the default content type and a nil-safe header map.
func (m Message) Normalized() Message {
	if m.EventID == "" {
		m.EventID = NewEventID()
	}
	if m.SchemaVersion == 0 {
		m.SchemaVersion = 1
	}
	if m.ContentType == "" {
		m.ContentType = DefaultContentType
	}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	return m
}
