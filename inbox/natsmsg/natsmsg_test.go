package natsmsg_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/inbox/inboxtest"
	"github.com/outbox-go/outbox/inbox/natsmsg"
)

const id = "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a"

// relayHeader encodes e the way the outbox relay's NATS adapter does: the
// CloudEvents attributes percent-encoded under ce-, and Nats-Msg-Id.
func relayHeader(e outbox.Event) nats.Header {
	h := nats.Header{}
	for _, a := range broker.CloudEventAttributes(e, "billing") {
		h.Set("ce-"+a.Name, broker.PercentEncode(a.Value))
	}
	h.Set(nats.MsgIdHdr, e.EventID)
	for k, v := range e.Headers {
		h.Set(k, v)
	}
	return h
}

func TestFromMsgRoundTrip(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 3, 4, 5, 6, 7, 8000, time.UTC)
	e := outbox.Event{ID: 7, CreatedAt: created, Message: outbox.Message{
		EventID: id, Topic: "orders.paid", Key: "订单 42", Type: "Order Paid",
		AggregateType: "Order", SchemaVersion: 2, ContentType: "application/json",
		Payload: []byte(`{"id":42}`), Headers: map[string]string{"tenant": "acme", "X-Request-Id": "r-1"},
	}}
	h := relayHeader(e)
	h["Status"] = []string{"100"} // nats.go's status, not the producer's header
	h["Nats-Expected-Stream"] = []string{"ORDERS"}
	got, err := natsmsg.FromMsg(&nats.Msg{Subject: e.Topic, Header: h, Data: e.Payload})
	if err != nil {
		t.Fatal(err)
	}
	if got.EventID != id || got.Type != "Order Paid" || got.Key != "订单 42" || got.SchemaVersion != 2 ||
		got.AggregateType != "Order" || got.Source != "billing" || got.ContentType != "application/json" ||
		got.Topic != "orders.paid" || string(got.Payload) != `{"id":42}` || !got.Time.Equal(created) {
		t.Errorf("FromMsg = %+v", got)
	}
	if len(got.Headers) != 2 || got.Headers["tenant"] != "acme" || got.Headers["X-Request-Id"] != "r-1" {
		t.Errorf("Headers = %v, want only tenant=acme and X-Request-Id=r-1", got.Headers)
	}
	if len(got.Extensions) != 0 {
		t.Errorf("Extensions = %v, want none", got.Extensions)
	}
}

type fakeJS struct {
	jetstream.Msg // only the methods below are called
	subject       string
	h             nats.Header
	data          []byte
}

func (m fakeJS) Subject() string      { return m.subject }
func (m fakeJS) Headers() nats.Header { return m.h }
func (m fakeJS) Data() []byte         { return m.data }

func TestFromJetStream(t *testing.T) {
	t.Parallel()
	got, err := natsmsg.FromJetStream(fakeJS{subject: "orders", h: nats.Header{"Nats-Msg-Id": {id}}, data: []byte("x")})
	if err != nil || got.EventID != id || got.Topic != "orders" || string(got.Payload) != "x" || got.SchemaVersion != 1 {
		t.Errorf("FromJetStream = %+v, %v", got, err)
	}
	if _, err := natsmsg.FromJetStream(nil); err == nil {
		t.Error("FromJetStream(nil) succeeded")
	}
	if _, err := natsmsg.FromMsg(nil); err == nil {
		t.Error("FromMsg(nil) succeeded")
	}
}

func TestFromHeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		h      nats.Header
		check  func(inbox.Message) bool
		want   []error // all must match; nil means success
		header string  // the *HeaderError's header, when one is expected
	}{
		{name: "Nats-Msg-Id only", h: nats.Header{"Nats-Msg-Id": {id}},
			check: func(m inbox.Message) bool { return m.EventID == id && m.SchemaVersion == 1 }},
		{name: "ce-id wins over Nats-Msg-Id", h: nats.Header{"ce-id": {id}, "Nats-Msg-Id": {"0192f6c4-0000-7000-8000-000000000000"}},
			check: func(m inbox.Message) bool { return m.EventID == id }},
		{name: "names are case-insensitive", h: nats.Header{"CE-ID": {strings.ToUpper(id)}, "Ce-SchemaVersion": {"3"}, "ce-PartitionKey": {"k"}},
			check: func(m inbox.Message) bool { return m.EventID == id && m.SchemaVersion == 3 && m.Key == "k" }},
		{name: "lower-case nats-msg-id", h: nats.Header{"nats-msg-id": {id}},
			check: func(m inbox.Message) bool { return m.EventID == id }},
		{name: "double-quoted value", h: nats.Header{"ce-id": {id}, "ce-type": {`"Order Paid"`}},
			check: func(m inbox.Message) bool { return m.Type == "Order Paid" }},
		{name: "Content-Type fallback and extensions", h: nats.Header{"ce-id": {id}, "Content-Type": {"text/plain"}, "ce-traceparent": {"00-abc-01"}, "Nats-Expected-Stream": {"S"}},
			check: func(m inbox.Message) bool {
				return m.ContentType == "text/plain" && m.Extensions["traceparent"] == "00-abc-01" && len(m.Headers) == 0
			}},
		{name: "same id twice is fine", h: nats.Header{"ce-id": {id, id}},
			check: func(m inbox.Message) bool { return m.EventID == id }},

		{name: "no id", h: nats.Header{"ce-type": {"OrderPaid"}}, want: []error{inbox.ErrMissingEventID}},
		{name: "no headers", h: nil, want: []error{inbox.ErrMissingEventID}},
		{name: "structured mode", h: nats.Header{"Content-Type": {"application/cloudevents+json"}}, want: []error{inbox.ErrMissingEventID}},
		{name: "ce-id not a uuid", h: nats.Header{"ce-id": {"order-42"}}, want: []error{inbox.ErrMalformedHeader, inbox.ErrInvalidEventID}, header: "ce-id"},
		{name: "empty ce-id", h: nats.Header{"ce-id": {""}}, want: []error{inbox.ErrMalformedHeader, inbox.ErrMissingEventID}, header: "ce-id"},
		{name: "Nats-Msg-Id not a uuid", h: nats.Header{"Nats-Msg-Id": {"42"}}, want: []error{inbox.ErrMalformedHeader, inbox.ErrInvalidEventID}, header: "Nats-Msg-Id"},
		{name: "conflicting ids", h: nats.Header{"ce-id": {id, "0192f6c4-0000-7000-8000-000000000000"}}, want: []error{inbox.ErrMalformedHeader}, header: "ce-id"},
		{name: "schema version word", h: nats.Header{"ce-id": {id}, "ce-schemaversion": {"two"}}, want: []error{inbox.ErrMalformedHeader, inbox.ErrInvalidSchemaVersion}, header: "ce-schemaversion"},
		{name: "schema version zero", h: nats.Header{"ce-id": {id}, "ce-schemaversion": {"0"}}, want: []error{inbox.ErrInvalidSchemaVersion}},
		{name: "schema version negative", h: nats.Header{"ce-id": {id}, "ce-schemaversion": {"-2"}}, want: []error{inbox.ErrInvalidSchemaVersion}},
		{name: "schema version fraction", h: nats.Header{"ce-id": {id}, "ce-schemaversion": {"1.5"}}, want: []error{inbox.ErrInvalidSchemaVersion}},
		{name: "bad time", h: nats.Header{"ce-id": {id}, "ce-time": {"yesterday"}}, want: []error{inbox.ErrMalformedHeader, inbox.ErrInvalidTime}, header: "ce-time"},
		{name: "bad percent escape", h: nats.Header{"ce-id": {id}, "ce-type": {"Order%zz"}}, want: []error{inbox.ErrMalformedHeader, broker.ErrBadPercentEncoding}, header: "ce-type"},
		{name: "overlong utf-8", h: nats.Header{"ce-id": {id}, "ce-partitionkey": {"%C0%A0"}}, want: []error{inbox.ErrMalformedHeader}, header: "ce-partitionkey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := natsmsg.FromHeader("subj", tc.h, nil)
			if tc.want == nil {
				if err != nil || !tc.check(got) {
					t.Fatalf("FromHeader = %+v, %v", got, err)
				}
				return
			}
			inboxtest.WantParseError(t, err, tc.want, tc.header)
			if got.EventID != "" {
				t.Errorf("a failed parse returned a message: %+v", got)
			}
		})
	}
}

func FuzzFromHeader(f *testing.F) {
	f.Add(id, "2", "Order%20Paid", "2026-03-04T05:06:07Z", "")
	f.Add("", "", "", "", id)
	f.Add("nope", "x", "%zz", "bad", "also-bad")
	f.Add(`"`+id+`"`, "007", "€", "2026-03-04T05:06:07.123+02:00", id)
	f.Fuzz(func(t *testing.T, ceID, schema, typ, ts, msgID string) {
		h := nats.Header{}
		for k, v := range map[string]string{"ce-id": ceID, "ce-schemaversion": schema, "ce-type": typ, "ce-time": ts, "Nats-Msg-Id": msgID} {
			if v != "" {
				h.Set(k, v)
			}
		}
		m, err := natsmsg.FromHeader("s", h, nil)
		if err != nil {
			if !errors.Is(err, inbox.ErrMalformedHeader) && !errors.Is(err, inbox.ErrMissingEventID) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if canon, err := inbox.ParseEventID(m.EventID); err != nil || canon != m.EventID {
			t.Fatalf("EventID %q is not canonical", m.EventID)
		}
		if m.SchemaVersion < 1 {
			t.Fatalf("SchemaVersion = %d", m.SchemaVersion)
		}
	})
}
