package natsbroker

import (
	"strings"

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
	validTopic string // the last topic validSubject accepted
	msg        nats.Msg
	header     nats.Header
	values     []string
	attrs      []broker.Attribute
}

func (b *Broker) newBatch() *batch {
	return &batch{
		source: b.source,
		header: make(nats.Header, 16),
		values: make([]string, 0, 16),
		attrs:  make([]broker.Attribute, 0, 9),
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
// next call.
func (bt *batch) message(events []outbox.Event, i int) (*nats.Msg, error) {
	e := &events[i]
	if e.EventID == "" {
		return nil, broker.Permanentf("natsbroker: event %d has no EventID, which JetStream deduplicates on (Nats-Msg-Id); the outbox table gives every row one by default", e.ID)
	}
	if e.Topic != bt.validTopic && !validSubject(e.Topic) {
		return nil, broker.Permanentf("natsbroker: event %s: topic %q is not a NATS subject one can publish to (dot-separated non-empty tokens, no spaces, no * or > wildcards); fix the topic", e.EventID, e.Topic)
	}
	bt.validTopic = e.Topic // a batch's events mostly share their topic
	bt.attrs = broker.AppendCloudEventAttributes(bt.attrs[:0], e, bt.source)
	h := bt.header
	clear(h)
	bt.values = bt.values[:0]
	for k, v := range e.Headers {
		if k == "" || strings.ContainsAny(k, "\r\n\x00: \t") || strings.ContainsAny(v, "\r\n\x00") {
			return nil, broker.Permanentf("natsbroker: event %s: header %q cannot be sent as a NATS header (empty name, or CR, LF, NUL, colon or space in it)", e.EventID, k)
		}
		if hasPrefixFold(k, "nats-") || hasPrefixFold(k, HeaderPrefix) {
			continue // would steer JetStream or overwrite the event's identity
		}
		h[k] = bt.value(v)
	}
	h[jetstream.MsgIDHeader] = bt.value(e.EventID)
	for _, a := range bt.attrs {
		v := a.Value
		if a.Name != broker.AttrSource { // bt.source is encoded already
			v = broker.PercentEncode(v)
		}
		h[headerName(a.Name)] = bt.value(v)
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

// hasPrefixFold is strings.HasPrefix ignoring ASCII case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func validSubject(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n\x00") {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return false
		}
	}
	return true
}
