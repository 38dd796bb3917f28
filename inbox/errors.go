package inbox

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Sentinel errors to branch on with errors.Is. Each message says what to do.
var (
	// ErrMissingEventID: the message carries no event id, so it cannot be
	// deduplicated. Nothing was processed.
	ErrMissingEventID = errors.New("inbox: message has no event id: set Message.EventID from the transport's dedup id (ce_id, ce-id, cloudEvents:id, Nats-Msg-Id, AMQP message-id); the inbox/kafkamsg, inbox/natsmsg and inbox/amqpmsg helpers do this")
	// ErrInvalidEventID: the event id is not a UUID. Nothing was processed.
	ErrInvalidEventID = errors.New("inbox: event id is not a UUID (want xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx); the producer must send the outbox event id unchanged")
	// ErrInvalidConsumer: the consumer name is empty, longer than
	// MaxConsumerLen characters, or not valid UTF-8.
	ErrInvalidConsumer = errors.New("inbox: invalid consumer name: use a non-empty, stable name of at most 255 characters (valid UTF-8, no NUL), e.g. \"points-service\"")
	// ErrInvalidKey: CheckVersion was given a key longer than MaxKeyLen
	// characters or not valid UTF-8.
	ErrInvalidKey = errors.New("inbox: invalid event key: keys used for version checks must be valid UTF-8 without NUL, at most 255 characters")
	// ErrHandlerPanic: the handler panicked. The transaction was rolled back
	// and nothing was recorded, so the message will be delivered again; fix
	// the handler. The error is a *PanicError carrying the value and stack.
	ErrHandlerPanic = errors.New("inbox: handler panicked; the transaction was rolled back and nothing was recorded, so the message will be redelivered; fix the handler")
	// ErrMalformedHeader: a transport header that identifies the event
	// (event id, schema version, time, …) cannot be parsed. Redelivery will
	// not fix it: dead-letter the message (Kafka: skip or send to a DLQ
	// topic; JetStream: Term; RabbitMQ: Nack without requeue). The error is a
	// *HeaderError naming the header.
	ErrMalformedHeader = errors.New("inbox: malformed message header")
	// ErrNotMigrated: the inbox table does not exist yet.
	ErrNotMigrated = errors.New("inbox: the inbox table does not exist; call Inbox.Migrate first (it is idempotent and safe to run from every instance at start-up)")
	// ErrInvalidConfig: New was given a configuration it cannot use.
	ErrInvalidConfig = errors.New("inbox: invalid configuration")
)

// PanicError is returned by Handle when the handler panicked. errors.Is
// matches ErrHandlerPanic.
type PanicError struct {
	Value any    // what the handler passed to panic
	Stack []byte // the handler goroutine's stack at the panic
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("inbox: handler panicked: %v; the transaction was rolled back and nothing was recorded, so the message will be redelivered; fix the handler (PanicError.Stack has the stack)", e.Value)
}

// Unwrap lets errors.Is match ErrHandlerPanic, and a panic value that is an
// error.
func (e *PanicError) Unwrap() []error {
	if err, ok := e.Value.(error); ok {
		return []error{ErrHandlerPanic, err}
	}
	return []error{ErrHandlerPanic}
}

// HeaderError says which transport header of a received message is wrong.
// errors.Is matches ErrMalformedHeader and Err.
type HeaderError struct {
	Header string // the header as the transport names it, e.g. "ce_id"
	Value  string // the offending value (shortened when long)
	Err    error  // the specific problem, e.g. ErrInvalidEventID
}

// maxShownValue bounds how much of a bad header value an error repeats.
const maxShownValue = 80

// NewHeaderError returns a *HeaderError for header with value, shortening
// the value kept for the message.
func NewHeaderError(header, value string, err error) *HeaderError {
	if len(value) > maxShownValue {
		cut := maxShownValue
		for cut > 0 && !utf8.RuneStart(value[cut]) {
			cut--
		}
		value = value[:cut] + "…"
	}
	return &HeaderError{Header: header, Value: value, Err: err}
}

func (e *HeaderError) Error() string {
	return fmt.Sprintf("inbox: malformed message header %s=%q: %s; redelivery will not fix this, so dead-letter the message and correct the producer", e.Header, e.Value, strings.TrimPrefix(e.Err.Error(), "inbox: "))
}

// Unwrap lets errors.Is match ErrMalformedHeader and the specific sentinel.
func (e *HeaderError) Unwrap() []error { return []error{ErrMalformedHeader, e.Err} }
