package natsbroker

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// batch builds the NATS messages of one Publish call, one at a time, in one
// message, one header map and one value array that every message of the
// batch reuses: nats.go serializes a message into its write buffer before
// PublishMsg returns, so nothing of the previous message is needed when the
// next one is built. Building a fresh header map per message was a sixth of
// the relay's CPU, and most of its garbage.
type batch struct {
	source     string // ce-source, percent-encoded once
	maxPayload int    // the server's max_payload; 0 while unknown
	validTopic string // the last topic subjectProblem accepted
	msg        nats.Msg
	header     nats.Header
	values     []string
	attrs      []broker.Attribute
}

func (b *Broker) newBatch() *batch {
	return &batch{
		source:     b.source,
		maxPayload: int(b.nc.MaxPayload()),
		header:     make(nats.Header, 16),
		values:     make([]string, 0, 16),
		attrs:      make([]broker.Attribute, 0, 9),
	}
}

// value returns v as a one-element header value, carved from the batch's
// value array.
func (bt *batch) value(v string) []string {
	bt.values = append(bt.values, v)
	n := len(bt.values)
	return bt.values[n-1 : n : n]
}

// message builds the NATS message for events[i]. It is valid until the
// next call. An event that cannot be sent as a valid CloudEvent, whose
// topic is not a subject one can publish to, that carries a header NATS
// reserves, or that does not fit the server's max_payload with its headers
// gets a permanent error: only rows written by plain SQL (or a store
// without Broker.Check) can reach here like that.
func (bt *batch) message(events []outbox.Event, i int) (*nats.Msg, error) {
	e := &events[i]
	if e.Topic != bt.validTopic {
		if why := subjectProblem(e.Topic); why != "" {
			return nil, broker.Permanentf("natsbroker: event %s: topic %q: %w: %s; fix the row's topic, then retry the event (outbox dead retry)", e.EventID, e.Topic, ErrInvalidSubject, why)
		}
		bt.validTopic = e.Topic // a batch's events mostly share their topic
	}
	if err := broker.CheckCloudEvent(e); err != nil {
		return nil, broker.Permanentf("natsbroker: event %s: %w; fix the row, then retry the event (outbox dead retry)", e.EventID, err)
	}
	bt.attrs = broker.AppendCloudEventAttributes(bt.attrs[:0], e, bt.source)
	h := bt.header
	clear(h)
	bt.values = bt.values[:0]
	size := headerFrame // the header block as nats.go writes it
	for k, v := range e.Headers {
		if err := broker.CheckHeader(broker.NATS, k, v); err != nil {
			return nil, broker.Permanentf("natsbroker: event %s: %w; fix the row's headers, then retry the event (outbox dead retry)", e.EventID, err)
		}
		h[k] = bt.value(v)
		size += len(k) + len(v) + headerLineExtra
	}
	h[jetstream.MsgIDHeader] = bt.value(e.EventID)
	size += len(jetstream.MsgIDHeader) + len(e.EventID) + headerLineExtra
	for _, a := range bt.attrs {
		v := a.Value
		if a.Name != broker.AttrSource { // bt.source is encoded already
			v = broker.PercentEncode(v)
		}
		name := headerName(a.Name)
		h[name] = bt.value(v)
		size += len(name) + len(v) + headerLineExtra
	}
	if bt.maxPayload > 0 && len(e.Payload)+size > bt.maxPayload {
		return nil, broker.Permanent(tooLarge(e.EventID, len(e.Payload), size, bt.maxPayload))
	}
	bt.msg = nats.Msg{Subject: e.Topic, Data: e.Payload, Header: h}
	return &bt.msg, nil
}

// ceHeaders maps the CloudEvents attribute names to their header names,
// built once so that no message concatenates them again.
var ceHeaders = func() map[string]string {
	m := make(map[string]string)
	for _, a := range []string{broker.AttrID, broker.AttrSource, broker.AttrSpecVersion, broker.AttrType, broker.AttrTime,
		broker.AttrDataContentType, broker.AttrPartitionKey, broker.AttrSchemaVersion, broker.AttrAggregateType} {
		m[a] = HeaderPrefix + a
	}
	return m
}()

// headerName is HeaderPrefix+name.
func headerName(name string) string {
	if h, ok := ceHeaders[name]; ok {
		return h
	}
	return HeaderPrefix + name
}
