// Package redismsg builds an inbox.Message from a Redis stream entry read
// with go-redis v9 (XREAD, XREADGROUP, XRANGE), so a consumer never parses
// fields by hand.
//
// It reads the entries as the outbox relay's Redis adapter
// (broker/redisbroker) writes them: the payload in field data; the
// CloudEvents attributes in ce_id, ce_type, ce_source, ce_specversion,
// ce_time, ce_schemaversion and ce_aggregatetype (raw values, not
// encoded); the content type in content_type and the event key in key;
// each producer header in h:<name>. Other ce_ fields land in
// Message.Extensions; fields of any other name are not the producer's and
// are ignored.
//
// A missing or malformed id, schema version or time is an error wrapping
// inbox.ErrMissingEventID or inbox.ErrMalformedHeader: redelivery will not
// fix it, so acknowledge the entry (XACK) after recording it elsewhere
// rather than leaving it pending.
package redismsg

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/inbox/internal/ceattr"
)

// Field names this package reads (those broker/redisbroker writes).
const (
	FieldData        = "data"         // the payload
	FieldContentType = "content_type" // datacontenttype
	FieldKey         = "key"          // partitionkey: the event key
	// AttrPrefix starts the fields of the other CloudEvents attributes.
	AttrPrefix = "ce_"
	// HeaderPrefix starts the field of each producer header.
	HeaderPrefix = "h:"
)

// FromXMessage builds an inbox.Message from an entry of stream. Payload is
// the data field.
func FromXMessage(stream string, m redis.XMessage) (inbox.Message, error) {
	return FromValues(stream, m.Values)
}

// FromValues builds an inbox.Message from an entry's fields, as go-redis
// returns them (string values; []byte is accepted too).
func FromValues(stream string, values map[string]any) (inbox.Message, error) {
	if values == nil {
		return inbox.Message{}, errors.New("redismsg: entry without fields")
	}
	var b ceattr.Builder
	b.Msg.Topic = stream
	names := make([]string, 0, len(values))
	for f := range values {
		names = append(names, f)
	}
	sort.Strings(names) // deterministic errors when a value conflicts
	for _, f := range names {
		v, ok := text(values[f])
		if !ok {
			b.Fail(inbox.NewHeaderError(f, fmt.Sprint(values[f]), fmt.Errorf("%w: field value of type %T, want a string", inbox.ErrMalformedHeader, values[f])))
			continue
		}
		switch {
		case f == FieldData:
			b.Msg.Payload = []byte(v)
		case f == FieldContentType:
			b.Attr(f, broker.AttrDataContentType, v)
		case f == FieldKey:
			b.Attr(f, broker.AttrPartitionKey, v)
		case strings.HasPrefix(f, HeaderPrefix):
			if name := f[len(HeaderPrefix):]; name != "" {
				b.Header(name, v)
			}
		case strings.HasPrefix(f, AttrPrefix):
			if attr := f[len(AttrPrefix):]; attr != "" {
				b.Attr(f, attr, v)
			}
		}
	}
	return b.Finish("the ce_id field")
}

func text(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}
