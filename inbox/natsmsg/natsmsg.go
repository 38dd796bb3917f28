// Package natsmsg builds an inbox.Message from a received NATS message
// (core NATS, the legacy JetStream API, or the jetstream package), so a
// consumer never parses headers by hand.
//
// It reads the CloudEvents NATS binding in binary mode, as the outbox relay
// publishes it: ce-id, ce-type, ce-source, ce-time, ce-datacontenttype,
// ce-partitionkey (the event key), ce-schemaversion and ce-aggregatetype,
// each percent-decoded as the binding requires. The event id falls back to
// JetStream's Nats-Msg-Id when ce-id is absent. Header names match
// case-insensitively, as NATS header names are case-insensitive. Other
// ce- attributes land in Message.Extensions; the other names NATS reserves
// (broker.ReservedHeaders(broker.NATS): Nats-*, Status, Description) are
// dropped; the rest are the producer's own headers.
//
// A missing or malformed id, schema version or time is an error wrapping
// inbox.ErrMissingEventID or inbox.ErrMalformedHeader: retrying will not
// fix it, so terminate the message (jetstream.Msg.Term) rather than Nak it.
package natsmsg

import (
	"errors"
	"sort"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/inbox/internal/ceattr"
)

// Header names this package reads.
const (
	// AttrPrefix is the CloudEvents NATS binding's header prefix.
	AttrPrefix = "ce-"
	// MsgIDHeader is JetStream's deduplication header: the event id.
	MsgIDHeader = nats.MsgIdHdr
	// ContentTypeHeader is read when ce-datacontenttype is absent.
	ContentTypeHeader = "Content-Type"
)

// FromMsg builds an inbox.Message from a core NATS message or one delivered
// through the legacy nats.JetStreamContext API.
func FromMsg(m *nats.Msg) (inbox.Message, error) {
	if m == nil {
		return inbox.Message{}, errors.New("natsmsg: nil message")
	}
	return FromHeader(m.Subject, m.Header, m.Data)
}

// FromJetStream builds an inbox.Message from a message of the jetstream
// package (Consume, Fetch, Messages).
func FromJetStream(m jetstream.Msg) (inbox.Message, error) {
	if m == nil {
		return inbox.Message{}, errors.New("natsmsg: nil message")
	}
	return FromHeader(m.Subject(), m.Headers(), m.Data())
}

// FromHeader builds an inbox.Message from a message's parts: its subject,
// headers and data (kept as Payload without copying).
func FromHeader(subject string, h nats.Header, data []byte) (inbox.Message, error) {
	var b ceattr.Builder
	b.Msg.Topic, b.Msg.Payload = subject, data
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	sort.Strings(names) // deterministic errors when a value conflicts
	var msgID, msgIDHeader, contentType string
	for _, name := range names {
		vals := h[name]
		if len(vals) == 0 {
			continue
		}
		lower := strings.ToLower(name)
		switch {
		case strings.HasPrefix(lower, AttrPrefix):
			attr := lower[len(AttrPrefix):]
			if attr == "" {
				continue
			}
			for _, v := range vals {
				dec, err := broker.PercentDecode(v)
				if err != nil {
					b.Fail(inbox.NewHeaderError(name, v, err))
					break
				}
				b.Attr(name, attr, dec)
			}
		case lower == strings.ToLower(MsgIDHeader):
			if msgID == "" {
				msgID, msgIDHeader = vals[0], name
			}
		case lower == "content-type":
			if contentType == "" {
				contentType = vals[0]
			}
		case broker.IsReservedHeader(broker.NATS, name):
			// JetStream's own (Nats-*) and nats.go's status headers.
		default:
			b.Header(name, vals[0])
		}
	}
	if !b.Has(broker.AttrID) && msgID != "" {
		b.Attr(msgIDHeader, broker.AttrID, msgID)
	}
	if b.Msg.ContentType == "" {
		b.Msg.ContentType = contentType
	}
	return b.Finish("ce-id and Nats-Msg-Id headers")
}
