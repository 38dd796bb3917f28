package amqpbroker

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// headerOverhead is what AMQP's table encoding adds to each header: the
// name's length byte, the value's type byte and its 4-byte length.
const headerOverhead = 1 + 1 + 4

// propertyOverhead is a bound on the fixed part of the encoded properties
// (flags, delivery mode, timestamp, length bytes).
const propertyOverhead = 32

// attrNames are the header names of the CloudEvents attributes, built once.
var attrNames = func() map[string]string {
	m := map[string]string{}
	for _, a := range []string{broker.AttrID, broker.AttrSource, broker.AttrSpecVersion, broker.AttrType, broker.AttrTime,
		broker.AttrDataContentType, broker.AttrPartitionKey, broker.AttrSchemaVersion, broker.AttrAggregateType} {
		m[a] = AttrPrefix + a
	}
	return m
}()

// messageSize is the size Config.MaxMessage is compared with: the body,
// the headers (user headers and cloudEvents: attributes) as AMQP encodes
// them, and the properties.
func messageSize(e *outbox.Event, source string) int {
	n := len(e.Payload) + propertyOverhead + len(e.EventID) + len(e.Type) + len(e.ContentType)
	for k, v := range e.Headers {
		n += len(k) + len(v) + headerOverhead
	}
	for _, a := range broker.AppendCloudEventAttributes(make([]broker.Attribute, 0, 9), e, source) {
		if a.Name == broker.AttrDataContentType {
			n += len(a.Value) // the content-type property
			continue
		}
		n += len(attrNames[a.Name]) + len(a.Value) + headerOverhead
	}
	return n
}

// checkHeaders is broker.CheckHeaders for AMQP plus AMQP's own limit: a
// table key is a short string of at most 255 bytes.
func checkHeaders(h map[string]string) error {
	for k, v := range h {
		if len(k) > 255 {
			return fmt.Errorf("header %.40q…: %w: the name is %d bytes; AMQP header names are at most 255 bytes (%w)", k, outbox.ErrInvalidHeader, len(k), outbox.ErrInvalidMessage)
		}
		if err := broker.CheckHeader(broker.AMQP, k, v); err != nil {
			return err
		}
	}
	return nil
}

// check returns the permanent error of an event the Broker will not send,
// or nil.
func (b *Broker) check(e *outbox.Event) error {
	if err := broker.CheckCloudEvent(e); err != nil {
		return broker.Permanentf("amqpbroker: event %s: %w; fix the row, then retry the event (outbox dead retry)", e.EventID, err)
	}
	if err := checkHeaders(e.Headers); err != nil {
		return broker.Permanentf("amqpbroker: event %s: %w; fix the row, then retry the event (outbox dead retry)", e.EventID, err)
	}
	if len(e.Topic) > 255 {
		return broker.Permanentf("amqpbroker: event %s: topic %.40q… is %d bytes; an AMQP routing key is at most 255 bytes (%w); fix the row's topic, then retry the event (outbox dead retry)", e.EventID, e.Topic, len(e.Topic), outbox.ErrInvalidMessage)
	}
	if size := messageSize(e, b.cfg.Source); size > b.cfg.MaxMessage {
		return broker.Permanentf("amqpbroker: event %s: its %d-byte payload with its headers takes %d bytes, above MaxMessage (%d) (%w; %w); store large data elsewhere and send a reference, or raise Config.MaxMessage and RabbitMQ's max_message_size; check events at enqueue with Broker.Check as store.Options.Check",
			e.EventID, len(e.Payload), size, b.cfg.MaxMessage, ErrTooLarge, outbox.ErrPayloadTooLarge)
	}
	return nil
}

// fill sets msg to e's message, reusing msg.Headers (cleared first): a
// session publishes one message at a time, and amqp091-go encodes it
// before Publish returns.
func (b *Broker) fill(msg *amqp.Publishing, e *outbox.Event, attrs []broker.Attribute) []broker.Attribute {
	h := msg.Headers
	clear(h)
	*msg = amqp.Publishing{
		Headers:      h,
		DeliveryMode: amqp.Persistent,
		MessageId:    e.EventID,
		Type:         e.Type,
		Body:         e.Payload,
	}
	if !e.CreatedAt.IsZero() {
		msg.Timestamp = e.CreatedAt
	}
	attrs = broker.AppendCloudEventAttributes(attrs[:0], e, b.cfg.Source)
	for _, a := range attrs {
		if a.Name == broker.AttrDataContentType {
			msg.ContentType = a.Value
			continue
		}
		h[attrNames[a.Name]] = a.Value
	}
	for k, v := range e.Headers {
		h[k] = v
	}
	return attrs
}
