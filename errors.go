package outbox

import (
	"errors"
	"fmt"
)

// Sentinel errors returned (wrapped in a *ValidationError) by Validate and by
// every Enqueue. The caller's transaction is left untouched and usable.
var (
	ErrInvalidMessage  = errors.New("outbox: invalid message")
	ErrEmptyTopic      = errors.New("outbox: topic is empty")
	ErrEmptyType       = errors.New("outbox: type is empty")
	ErrFieldTooLong    = errors.New("outbox: field too long")
	ErrPayloadTooLarge = errors.New("outbox: payload too large")
	ErrInvalidHeader   = errors.New("outbox: invalid header")
	ErrReservedHeader  = errors.New("outbox: reserved header name")
	ErrInvalidEventID  = errors.New("outbox: event id is not a UUID")
	ErrInvalidText     = errors.New("outbox: text is not a valid CloudEvents string")
	// ErrSchemaViolation: the payload is not valid JSON or does not match
	// the JSON Schema registered for its (Type, SchemaVersion); see package
	// eventschema.
	ErrSchemaViolation = errors.New("outbox: payload does not match its schema")
)

// ValidationError says which field of which message is wrong and how to fix
// it. errors.Is matches both ErrInvalidMessage and the specific sentinel.
type ValidationError struct {
	Index int    // position of the message in the Enqueue call
	Field string // Go field name, e.g. "Topic" or "Headers[x-trace]"
	Err   error  // the sentinel
	Fix   string // what to do about it
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("outbox: message %d: %s: %v; %s", e.Index, e.Field, trimPrefix(e.Err), e.Fix)
}

// Unwrap lets errors.Is match the sentinel and ErrInvalidMessage.
func (e *ValidationError) Unwrap() []error { return []error{e.Err, ErrInvalidMessage} }

func trimPrefix(err error) string {
	s := err.Error()
	const p = "outbox: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}
