// Package amqpmsg builds an inbox.Message from a RabbitMQ delivery
// (github.com/rabbitmq/amqp091-go), so a consumer never parses headers by
// hand.
//
// It reads the CloudEvents AMQP binding in binary mode, as the outbox relay
// publishes it: headers cloudEvents:id, cloudEvents:type,
// cloudEvents:source, cloudEvents:time, cloudEvents:partitionkey (the event
// key), cloudEvents:schemaversion and cloudEvents:aggregatetype; the
// cloudEvents_ spelling (JMS-friendly) is read too. Values may be strings or
// native AMQP types (integers, timestamps). Without them it falls back to
// the message properties: message-id for the event id, type, timestamp.
// The content type is the content-type property. Other cloudEvents
// attributes land in Message.Extensions; the names AMQP reserves
// (broker.ReservedHeaders(broker.AMQP): RabbitMQ's x-death, x-delay, CC,
// BCC, JMS* and the like, which an outbox producer cannot send) are
// dropped; the rest, X-Request-Id included, are the producer's own
// headers.
//
// A missing or malformed id, schema version or time is an error wrapping
// inbox.ErrMissingEventID or inbox.ErrMalformedHeader: retrying will not
// fix it, so Nack the delivery without requeue (to a dead-letter exchange).
package amqpmsg

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/inbox/internal/ceattr"
)

// Header names this package reads.
const (
	// AttrPrefix is the CloudEvents AMQP binding's application-property
	// prefix.
	AttrPrefix = "cloudEvents:"
	// AttrPrefixAlt is the underscore spelling some JMS-based producers use.
	AttrPrefixAlt = "cloudEvents_"
)

// ErrUnsupportedValue is the Err of an *inbox.HeaderError for a
// cloudEvents header whose AMQP type cannot hold the attribute (a table, an
// array, a decimal).
var ErrUnsupportedValue = errors.New("the header's AMQP type cannot carry a CloudEvents attribute")

// FromDelivery builds an inbox.Message from d. Payload is d.Body, not a
// copy.
func FromDelivery(d amqp.Delivery) (inbox.Message, error) {
	var b ceattr.Builder
	b.Msg.Topic, b.Msg.Payload = d.RoutingKey, d.Body
	names := make([]string, 0, len(d.Headers))
	for name := range d.Headers {
		names = append(names, name)
	}
	sort.Strings(names) // deterministic errors when a value conflicts
	lp, lpAlt := strings.ToLower(AttrPrefix), strings.ToLower(AttrPrefixAlt)
	for _, name := range names {
		v := d.Headers[name]
		lower := strings.ToLower(name)
		var attr string
		switch {
		case strings.HasPrefix(lower, lp):
			attr = lower[len(lp):]
		case strings.HasPrefix(lower, lpAlt):
			attr = lower[len(lpAlt):]
		case broker.IsReservedHeader(broker.AMQP, name):
			continue // RabbitMQ's or JMS's own (x-death, CC, …): not the producer's
		default:
			if s, ok := text(v); ok {
				b.Header(name, s)
			} else {
				b.Header(name, fmt.Sprint(v))
			}
			continue
		}
		if attr == "" {
			continue
		}
		s, ok := text(v)
		if !ok {
			b.Fail(inbox.NewHeaderError(name, fmt.Sprintf("%T", v), ErrUnsupportedValue))
			break
		}
		b.Attr(name, attr, s)
	}
	if !b.Has(broker.AttrID) && d.MessageId != "" {
		b.Attr("message-id", broker.AttrID, d.MessageId)
	}
	if !b.Has(broker.AttrType) && d.Type != "" {
		b.Attr("type", broker.AttrType, d.Type)
	}
	if !b.Has(broker.AttrTime) && !d.Timestamp.IsZero() {
		b.Msg.Time = d.Timestamp
	}
	if d.ContentType != "" {
		b.Msg.ContentType = d.ContentType
	}
	return b.Finish("the cloudEvents:id header and the message-id property")
}

// text renders an AMQP header value in the CloudEvents canonical string
// form: strings as they are, integers in decimal, timestamps in RFC 3339.
func text(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		if !utf8.Valid(x) {
			return "", false
		}
		return string(x), true
	case bool:
		return strconv.FormatBool(x), true
	case int:
		return strconv.Itoa(x), true
	case int8:
		return strconv.FormatInt(int64(x), 10), true
	case int16:
		return strconv.FormatInt(int64(x), 10), true
	case int32:
		return strconv.FormatInt(int64(x), 10), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case uint8:
		return strconv.FormatUint(uint64(x), 10), true
	case uint16:
		return strconv.FormatUint(uint64(x), 10), true
	case uint32:
		return strconv.FormatUint(uint64(x), 10), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano), true
	}
	return "", false
}
