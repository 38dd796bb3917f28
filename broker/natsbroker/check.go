package natsbroker

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// ErrInvalidSubject is wrapped when an event's topic is not a NATS subject
// one can publish to: at enqueue by Check, at publish as a permanent error.
var ErrInvalidSubject = errors.New("topic is not a NATS subject one can publish to")

var _ broker.Checker = (*Broker)(nil)

// The bytes nats.go adds around the headers of a message (see
// nats.Msg.headerSize): "NATS/1.0\r\n" and a closing "\r\n", and ": " and
// "\r\n" on each line.
const (
	headerFrame     = len("NATS/1.0\r\n") + len("\r\n")
	headerLineExtra = len(": ") + len("\r\n")
)

// longestTime formats as the longest ce-time value (nanoseconds, UTC), so
// Check can size an event before its creation time is known.
var longestTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)

// Check reports, before m is enqueued, whether the Broker can deliver it:
// its topic must be a NATS subject one can publish to, and its payload plus
// the headers it will carry must fit the server's max_payload (the ce-time
// header is counted at its longest, so a message within a few bytes of the
// limit may be refused although it would just fit). It implements
// broker.Checker: use it as store.Options.Check so the producer hears of it
// at Enqueue, where it can still fix the message. Before the first
// connection the server's max_payload is unknown and only the topic is
// checked. Errors are *outbox.ValidationError.
func (b *Broker) Check(m outbox.Message) error {
	if why := subjectProblem(m.Topic); why != "" {
		return &outbox.ValidationError{Field: "Topic", Err: ErrInvalidSubject, Fix: why}
	}
	if err := broker.CheckHeaders(broker.NATS, m.Headers); err != nil {
		return &outbox.ValidationError{Field: "Headers", Err: err, Fix: "rename or remove the header"}
	}
	limit := int(b.nc.MaxPayload())
	if limit <= 0 {
		return nil
	}
	e := outbox.Event{Message: m, CreatedAt: longestTime}
	if e.EventID == "" {
		e.EventID = "00000000-0000-0000-0000-000000000000" // the length of the one the store will set
	}
	if size := len(m.Payload) + headerSize(&e, b.source); size > limit {
		hdr := size - len(m.Payload)
		return &outbox.ValidationError{Field: "Payload", Err: outbox.ErrPayloadTooLarge, Fix: fmt.Sprintf(
			"with its %d bytes of headers it takes %d bytes, above the NATS server's max_payload of %d; keep the payload to %d bytes (store large data elsewhere and send a reference), or raise max_payload in the server's configuration",
			hdr, size, limit, max(limit-hdr, 0))}
	}
	return nil
}

// headerSize is the size of the header block message builds for e, as
// nats.go counts it against max_payload. source is percent-encoded.
func headerSize(e *outbox.Event, source string) int {
	size := headerFrame
	for k, v := range e.Headers {
		size += len(k) + len(v) + headerLineExtra
	}
	size += len(jetstream.MsgIDHeader) + len(e.EventID) + headerLineExtra
	for _, a := range broker.AppendCloudEventAttributes(nil, e, source) {
		n := len(a.Value)
		if a.Name != broker.AttrSource {
			n = broker.PercentEncodedLen(a.Value)
		}
		size += len(headerName(a.Name)) + n + headerLineExtra
	}
	return size
}

// tooLarge is the error of an event that does not fit max_payload with its
// headers. It wraps nats.ErrMaxPayload and outbox.ErrPayloadTooLarge.
func tooLarge(id string, payload, headers, limit int) error {
	return fmt.Errorf("natsbroker: event %s: its %d-byte payload plus %d bytes of headers is %d bytes, above the NATS server's max_payload of %d (%w; %w); store large data elsewhere and send a reference, or raise max_payload; check events at enqueue with Broker.Check as store.Options.Check",
		id, payload, headers, payload+headers, limit, nats.ErrMaxPayload, outbox.ErrPayloadTooLarge)
}

// subjectProblem returns why s is not a subject one can publish to, or ""
// when it is: NATS subjects are dot-separated non-empty tokens without
// spaces or control characters, and a publish may not use the wildcard
// tokens * and >. One pass over the bytes.
func subjectProblem(s string) string {
	if s == "" {
		return "it is empty"
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			c := s[i]
			if c <= ' ' || c == 0x7f {
				return fmt.Sprintf("byte %d is a space or control character (%q), which NATS subjects cannot hold; use dot-separated tokens such as orders.paid", i, c)
			}
			if c != '.' {
				continue
			}
		}
		switch tok := s[start:i]; tok {
		case "":
			return "it has an empty token (a leading, trailing or doubled dot); use dot-separated tokens such as orders.paid"
		case "*", ">":
			return fmt.Sprintf("it has the wildcard token %q, which subscriptions use but a publish may not; name one subject, such as orders.paid", tok)
		}
		start = i + 1
	}
	return ""
}

var _ broker.Describer = (*Broker)(nil)

// Features declares the server's max_payload as the largest message
// (payload and headers together; 0 before the first connection). The
// ordering unit is OrderNone: JetStream may store a later message of a key
// whose earlier one failed in the same batch. The in-flight bound is
// Config.MaxPending, which the Broker enforces itself, so none is declared.
func (b *Broker) Features() broker.Features {
	return broker.Features{MaxMessage: int(b.nc.MaxPayload())}
}
