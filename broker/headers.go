package broker

import (
	"fmt"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/eventrule"
)

// Transport names a family of brokers that share a CloudEvents binding, and
// with it the header names the binding and the brokers reserve.
type Transport string

// The transports whose reserved header names are known.
const (
	NATS  Transport = "nats"  // NATS and JetStream: ce- headers, Nats-*, Status, Description
	Kafka Transport = "kafka" // Kafka: ce_ headers, Spring's kafka_* and __TypeId__
	AMQP  Transport = "amqp"  // AMQP and RabbitMQ: cloudEvents: properties, x-death, CC, …
	HTTP  Transport = "http"  // HTTP webhooks: ce- headers, webhook-*, framing headers
	Redis Transport = "redis" // Redis Streams: user headers are fields h:<name>, so only Content-Type
	MQTT  Transport = "mqtt"  // MQTT 5: the CloudEvents attribute names themselves (id, type, source, …)
)

func (t Transport) bits() eventrule.Transport {
	switch t {
	case NATS:
		return eventrule.NATS
	case Kafka:
		return eventrule.Kafka
	case AMQP:
		return eventrule.AMQP
	case HTTP:
		return eventrule.HTTP
	case Redis:
		return eventrule.Redis
	case MQTT:
		return eventrule.MQTT
	case "":
		return eventrule.All
	}
	return 0
}

// ReservedHeader is a user header name, or prefix of names, that a
// transport owns: its binding carries the event's attributes under it, or
// the broker or a common client acts on it.
type ReservedHeader struct {
	Name   string // lower-case; names are compared ignoring ASCII case
	Prefix bool   // every name that starts with Name is reserved
	Why    string // what the transport does with it
	Fix    string // what to do instead
}

// ReservedHeaders returns the header names t reserves; "" means every
// transport (what outbox.Validate refuses at enqueue). An unknown
// transport reserves nothing.
func ReservedHeaders(t Transport) []ReservedHeader {
	var out []ReservedHeader
	for i := range eventrule.Rules {
		if r := &eventrule.Rules[i]; r.Owners&t.bits() != 0 {
			out = append(out, ReservedHeader{Name: r.Name, Prefix: r.Prefix, Why: r.Why, Fix: r.Fix})
		}
	}
	return out
}

// IsReservedHeader reports whether t reserves the header name ("" means any
// transport), ignoring ASCII case.
func IsReservedHeader(t Transport, name string) bool {
	_, ok := eventrule.Reserved(t.bits(), name)
	return ok
}

// CheckHeaders returns why the user headers h cannot be sent over t
// unchanged, or nil: a name that is not an HTTP token, a value with a
// control character or a leading or trailing space, or a name t reserves
// ("" means any transport). These are the rules outbox.Validate applies at
// enqueue; adapters apply them to rows written by plain SQL and return the
// error as Permanent. It wraps outbox.ErrInvalidMessage and
// outbox.ErrInvalidHeader or outbox.ErrReservedHeader.
func CheckHeaders(t Transport, h map[string]string) error {
	for k, v := range h {
		if err := CheckHeader(t, k, v); err != nil {
			return err
		}
	}
	return nil
}

// CheckHeader is CheckHeaders for one header, for adapters that check each
// header as they copy it.
func CheckHeader(t Transport, name, value string) error {
	if why := eventrule.CheckHeaderName(name); why != "" {
		return fmt.Errorf("header %q: %w: %s (%w)", name, outbox.ErrInvalidHeader, why, outbox.ErrInvalidMessage)
	}
	if why := eventrule.CheckHeaderValue(value); why != "" {
		return fmt.Errorf("header %q: %w: %s (%w)", name, outbox.ErrInvalidHeader, why, outbox.ErrInvalidMessage)
	}
	bits := t.bits()
	if r, ok := eventrule.Reserved(bits, name); ok {
		return fmt.Errorf("header %q: %w: %s reserves it: %s; %s (%w)", name, outbox.ErrReservedHeader, (r.Owners & bits).Names(), r.Why, r.Fix, outbox.ErrInvalidMessage)
	}
	return nil
}
