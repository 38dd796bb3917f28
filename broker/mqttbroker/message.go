package mqttbroker

import (
	"fmt"
	"unicode/utf8"

	"github.com/eclipse/paho.golang/paho"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// varintLen is the length of n as an MQTT variable byte integer.
func varintLen(n int) int {
	switch {
	case n < 128:
		return 1
	case n < 16384:
		return 2
	case n < 2097152:
		return 3
	}
	return 4
}

// packetSize is the size of e's PUBLISH packet at QoS 1, as the server
// counts it against its Maximum Packet Size.
func packetSize(e *outbox.Event, source string) int {
	props := 0
	for _, a := range broker.AppendCloudEventAttributes(make([]broker.Attribute, 0, 9), e, source) {
		if a.Name == broker.AttrDataContentType {
			props += 1 + 2 + len(a.Value) // the Content Type property
			continue
		}
		props += 1 + 2 + len(a.Name) + 2 + len(a.Value)
	}
	for k, v := range e.Headers {
		props += 1 + 2 + len(k) + 2 + len(v)
	}
	remaining := 2 + len(e.Topic) + 2 + varintLen(props) + props + len(e.Payload)
	return 1 + varintLen(remaining) + remaining
}

// topicProblem returns why s is not a topic name one can publish to, or
// "": MQTT topic names are non-empty UTF-8 strings of at most 65,535 bytes
// without the wildcards + and # and without U+0000 (control characters,
// which servers may refuse, are refused too).
func topicProblem(s string) string {
	switch {
	case s == "":
		return "it is empty; name the MQTT topic, e.g. orders/paid"
	case len(s) > 65535:
		return fmt.Sprintf("it is %d bytes; MQTT topic names are at most 65,535 bytes", len(s))
	case !utf8.ValidString(s):
		return "it is not valid UTF-8, which MQTT topic names must be"
	}
	for i, r := range s {
		switch {
		case r == '+' || r == '#':
			return fmt.Sprintf("it holds the wildcard %q at byte %d, which subscriptions use but a PUBLISH may not; name one topic, such as orders/paid", r, i)
		case r < 0x20 || (r >= 0x7f && r <= 0x9f):
			return fmt.Sprintf("it holds the control character %U at byte %d; MQTT topic names must not", r, i)
		}
	}
	return ""
}

// check returns the permanent error of an event the Broker will not send,
// or nil.
func (b *Broker) check(e *outbox.Event, limit int) error {
	if why := topicProblem(e.Topic); why != "" {
		return broker.Permanentf("mqttbroker: event %s: topic %.60q: %w: %s; fix the row's topic, then retry the event (outbox dead retry)", e.EventID, e.Topic, ErrInvalidTopic, why)
	}
	if err := broker.CheckEvent(broker.MQTT, e); err != nil {
		return broker.Permanentf("mqttbroker: event %s: %w; fix the row, then retry the event (outbox dead retry)", e.EventID, err)
	}
	if size := packetSize(e, b.cfg.Source); size > limit {
		return broker.Permanentf("mqttbroker: event %s: its %d-byte payload makes a %d-byte PUBLISH packet with the topic and properties, above the maximum packet size of %d (%w; %w); store large data elsewhere and send a reference, or raise the server's max_packet_size; check events at enqueue with Broker.Check as store.Options.Check",
			e.EventID, len(e.Payload), size, limit, ErrTooLarge, outbox.ErrPayloadTooLarge)
	}
	return nil
}

// message builds e's PUBLISH at QoS 1: the CloudEvents attributes as user
// properties named like them, the content type as the Content Type
// property, then the user headers.
func (b *Broker) message(e *outbox.Event) *paho.Publish {
	attrs := broker.AppendCloudEventAttributes(make([]broker.Attribute, 0, 9), e, b.cfg.Source)
	props := &paho.PublishProperties{User: make(paho.UserProperties, 0, len(attrs)+len(e.Headers))}
	for _, a := range attrs {
		if a.Name == broker.AttrDataContentType {
			props.ContentType = a.Value
			continue
		}
		props.User = append(props.User, paho.UserProperty{Key: a.Name, Value: a.Value})
	}
	for k, v := range e.Headers {
		props.User = append(props.User, paho.UserProperty{Key: k, Value: v})
	}
	return &paho.Publish{QoS: 1, Topic: e.Topic, Payload: e.Payload, Properties: props}
}
