// Package kafkamsg builds an inbox.Message from a record fetched with
// franz-go (github.com/twmb/franz-go/pkg/kgo), so a consumer never parses
// headers by hand.
//
// It reads the CloudEvents Kafka binding in binary mode, as the outbox relay
// publishes it: headers ce_id, ce_type, ce_source, ce_time,
// ce_datacontenttype, ce_partitionkey, ce_schemaversion and
// ce_aggregatetype, with UTF-8 values. The event key is ce_partitionkey,
// else the record key; the content type is the content-type header, else
// ce_datacontenttype. Header names match case-insensitively. Other ce_
// attributes land in Message.Extensions; the other names Kafka reserves
// (broker.ReservedHeaders(broker.Kafka): Spring's kafka_* and __TypeId__,
// which an outbox producer cannot send) are dropped; the rest are the
// producer's own headers.
//
// A missing or malformed id, schema version or time is an error wrapping
// inbox.ErrMissingEventID or inbox.ErrMalformedHeader: retrying will not
// fix it, so send the record to a dead-letter topic and commit its offset.
package kafkamsg

import (
	"errors"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/inbox/internal/ceattr"
)

// Header names this package reads.
const (
	// AttrPrefix is the CloudEvents Kafka binding's header prefix.
	AttrPrefix = "ce_"
	// ContentTypeHeader carries datacontenttype in binary mode.
	ContentTypeHeader = "content-type"
)

// FromRecord builds an inbox.Message from r. Payload is r.Value, not a
// copy.
func FromRecord(r *kgo.Record) (inbox.Message, error) {
	if r == nil {
		return inbox.Message{}, errors.New("kafkamsg: nil record")
	}
	return FromParts(r.Topic, r.Key, r.Headers, r.Value)
}

// FromParts builds an inbox.Message from a record's topic, key, headers and
// value, for code that holds them apart.
func FromParts(topic string, key []byte, headers []kgo.RecordHeader, value []byte) (inbox.Message, error) {
	var b ceattr.Builder
	b.Msg.Topic, b.Msg.Payload = topic, value
	contentType, haveCT := "", false
	for _, h := range headers {
		lower := strings.ToLower(h.Key)
		switch {
		case strings.HasPrefix(lower, AttrPrefix):
			if attr := lower[len(AttrPrefix):]; attr != "" {
				b.Attr(h.Key, attr, string(h.Value))
			}
		case lower == ContentTypeHeader:
			if !haveCT {
				contentType, haveCT = string(h.Value), true
			}
		case broker.IsReservedHeader(broker.Kafka, h.Key):
			// Spring's own (kafka_*, __TypeId__, …): not the producer's
		default:
			b.Header(h.Key, string(h.Value))
		}
	}
	if haveCT {
		b.Msg.ContentType = contentType
	}
	if !b.Has(broker.AttrPartitionKey) {
		b.Msg.Key = string(key)
	}
	return b.Finish("the ce_id header")
}
