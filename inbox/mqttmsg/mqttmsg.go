// Package mqttmsg builds an inbox.Message from an MQTT 5 PUBLISH received
// with github.com/eclipse/paho.golang (paho or autopaho), so a consumer
// never parses user properties by hand.
//
// It reads the CloudEvents MQTT binding in binary mode, as the outbox relay
// publishes it: the user properties id, type, source, time, partitionkey
// (the event key), schemaversion and aggregatetype, named exactly like the
// attributes (matched ignoring ASCII case), and the Content Type property
// for datacontenttype. The other attribute names the binding defines
// (specversion, subject, dataschema, datacontenttype) are read too; every
// other user property is the producer's own header (the MQTT binding gives
// extensions no prefix, so a header and an extension cannot be told
// apart: they land in Message.Headers). When a user property appears more
// than once, the first value of a header wins, and an attribute with two
// different values is an error.
//
// A missing or malformed id, schema version or time is an error wrapping
// inbox.ErrMissingEventID or inbox.ErrMalformedHeader: retrying will not
// fix it, so acknowledge the message and set it aside rather than wait for
// a redelivery.
package mqttmsg

import (
	"errors"
	"strings"

	"github.com/eclipse/paho.golang/paho"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/inbox/internal/ceattr"
)

// attributes are the user property names read as CloudEvents attributes.
var attributes = map[string]bool{
	broker.AttrID: true, broker.AttrSource: true, broker.AttrSpecVersion: true, broker.AttrType: true,
	broker.AttrTime: true, broker.AttrDataContentType: true, broker.AttrPartitionKey: true,
	broker.AttrSchemaVersion: true, broker.AttrAggregateType: true, "subject": true, "dataschema": true,
}

// FromPublish builds an inbox.Message from a received PUBLISH (as paho
// hands it to an OnPublishReceived handler: PublishReceived.Packet).
// Payload is p.Payload, not a copy.
func FromPublish(p *paho.Publish) (inbox.Message, error) {
	if p == nil {
		return inbox.Message{}, errors.New("mqttmsg: nil PUBLISH")
	}
	return FromProperties(p.Topic, p.Properties, p.Payload)
}

// FromProperties builds an inbox.Message from a PUBLISH's parts: its
// topic, properties (nil when it had none) and payload.
func FromProperties(topic string, props *paho.PublishProperties, payload []byte) (inbox.Message, error) {
	var b ceattr.Builder
	b.Msg.Topic, b.Msg.Payload = topic, payload
	if props != nil {
		for _, up := range props.User {
			lower := strings.ToLower(up.Key)
			if attributes[lower] {
				b.Attr(up.Key, lower, up.Value)
				continue
			}
			b.Header(up.Key, up.Value)
		}
		if b.Msg.ContentType == "" {
			b.Msg.ContentType = props.ContentType
		}
	}
	return b.Finish("the id user property")
}
