package amqpmsg_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/inbox/amqpmsg"
	"github.com/outbox-go/outbox/inbox/inboxtest"
)

const id = "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a"

// relayDelivery encodes e the way the CloudEvents AMQP binding (binary
// mode) does: cloudEvents: application properties, content-type for
// datacontenttype, message-id = event id.
func relayDelivery(e outbox.Event) amqp.Delivery {
	d := amqp.Delivery{Headers: amqp.Table{}, MessageId: e.EventID, Type: e.Type, RoutingKey: e.Topic, Body: e.Payload}
	for _, a := range broker.CloudEventAttributes(e, "billing") {
		if a.Name == broker.AttrDataContentType {
			d.ContentType = a.Value
			continue
		}
		d.Headers["cloudEvents:"+a.Name] = a.Value
	}
	for k, v := range e.Headers {
		d.Headers[k] = v
	}
	return d
}

func TestFromDeliveryRoundTrip(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 3, 4, 5, 6, 7, 8000, time.UTC)
	e := outbox.Event{ID: 7, CreatedAt: created, Message: outbox.Message{
		EventID: id, Topic: "orders", Key: "订单 42", Type: "Order Paid",
		AggregateType: "Order", SchemaVersion: 2, ContentType: "application/json",
		Payload: []byte(`{"id":42}`), Headers: map[string]string{"tenant": "acme", "X-Request-Id": "r-1"},
	}}
	d := relayDelivery(e)
	d.Headers["x-death"] = []any{amqp.Table{"count": int64(1)}}
	d.Headers["CC"] = []any{"audit"}
	got, err := amqpmsg.FromDelivery(d)
	if err != nil {
		t.Fatal(err)
	}
	if got.EventID != id || got.Type != "Order Paid" || got.Key != "订单 42" || got.SchemaVersion != 2 ||
		got.AggregateType != "Order" || got.Source != "billing" || got.ContentType != "application/json" ||
		got.Topic != "orders" || string(got.Payload) != `{"id":42}` || !got.Time.Equal(created) {
		t.Errorf("FromDelivery = %+v", got)
	}
	if len(got.Headers) != 2 || got.Headers["tenant"] != "acme" || got.Headers["X-Request-Id"] != "r-1" {
		t.Errorf("Headers = %v, want only tenant=acme and X-Request-Id=r-1", got.Headers)
	}
}

func TestFromDelivery(t *testing.T) {
	t.Parallel()
	stamp := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		d      amqp.Delivery
		check  func(inbox.Message) bool
		want   []error
		header string
	}{
		{name: "properties only", d: amqp.Delivery{MessageId: strings.ToUpper(id), Type: "OrderPaid", Timestamp: stamp, ContentType: "text/plain"},
			check: func(m inbox.Message) bool {
				return m.EventID == id && m.Type == "OrderPaid" && m.Time.Equal(stamp) && m.ContentType == "text/plain" && m.SchemaVersion == 1
			}},
		{name: "native AMQP values", d: amqp.Delivery{Headers: amqp.Table{
			"cloudEvents:id": []byte(id), "cloudEvents:schemaversion": int32(3), "cloudEvents:time": stamp, "cloudEvents:sequence": int64(9), "cloudEvents:flag": true}},
			check: func(m inbox.Message) bool {
				return m.EventID == id && m.SchemaVersion == 3 && m.Time.Equal(stamp) && m.Extensions["sequence"] == "9" && m.Extensions["flag"] == "true"
			}},
		{name: "float schema version with an integral value", d: amqp.Delivery{Headers: amqp.Table{"cloudEvents:id": id, "cloudEvents:schemaversion": float64(2)}},
			check: func(m inbox.Message) bool { return m.SchemaVersion == 2 }},
		{name: "underscore prefix", d: amqp.Delivery{Headers: amqp.Table{"cloudEvents_id": id, "cloudEvents_partitionkey": "k"}},
			check: func(m inbox.Message) bool { return m.EventID == id && m.Key == "k" }},
		{name: "cloudEvents:id wins over message-id", d: amqp.Delivery{MessageId: "0192f6c4-0000-7000-8000-000000000000", Headers: amqp.Table{"cloudEvents:id": id}},
			check: func(m inbox.Message) bool { return m.EventID == id }},
		{name: "cloudEvents:type wins over type", d: amqp.Delivery{MessageId: id, Type: "Old", Headers: amqp.Table{"cloudEvents:type": "New"}},
			check: func(m inbox.Message) bool { return m.Type == "New" }},
		{name: "user headers of any type", d: amqp.Delivery{MessageId: id, Headers: amqp.Table{"tenant": "acme", "retries": int16(2), "x-delay": int32(5)}},
			check: func(m inbox.Message) bool {
				return m.Headers["tenant"] == "acme" && m.Headers["retries"] == "2" && len(m.Headers) == 2
			}},

		{name: "no id", d: amqp.Delivery{Type: "OrderPaid"}, want: []error{inbox.ErrMissingEventID}},
		{name: "structured mode", d: amqp.Delivery{ContentType: "application/cloudevents+json"}, want: []error{inbox.ErrMissingEventID}},
		{name: "message-id not a uuid", d: amqp.Delivery{MessageId: "42"}, want: []error{inbox.ErrMalformedHeader, inbox.ErrInvalidEventID}, header: "message-id"},
		{name: "cloudEvents:id not a uuid", d: amqp.Delivery{Headers: amqp.Table{"cloudEvents:id": "1234-1234-1234"}}, want: []error{inbox.ErrInvalidEventID}, header: "cloudEvents:id"},
		{name: "id is a table", d: amqp.Delivery{Headers: amqp.Table{"cloudEvents:id": amqp.Table{"a": "b"}}}, want: []error{inbox.ErrMalformedHeader, amqpmsg.ErrUnsupportedValue}, header: "cloudEvents:id"},
		{name: "id is binary", d: amqp.Delivery{Headers: amqp.Table{"cloudEvents:id": []byte{0xff, 0xfe}}}, want: []error{amqpmsg.ErrUnsupportedValue}},
		{name: "conflicting spellings", d: amqp.Delivery{Headers: amqp.Table{"cloudEvents:id": id, "cloudEvents_id": "0192f6c4-0000-7000-8000-000000000000"}}, want: []error{inbox.ErrMalformedHeader}},
		{name: "schema version word", d: amqp.Delivery{MessageId: id, Headers: amqp.Table{"cloudEvents:schemaversion": "two"}}, want: []error{inbox.ErrInvalidSchemaVersion}, header: "cloudEvents:schemaversion"},
		{name: "schema version fraction", d: amqp.Delivery{MessageId: id, Headers: amqp.Table{"cloudEvents:schemaversion": 1.5}}, want: []error{inbox.ErrInvalidSchemaVersion}},
		{name: "schema version decimal", d: amqp.Delivery{MessageId: id, Headers: amqp.Table{"cloudEvents:schemaversion": amqp.Decimal{Scale: 0, Value: 2}}}, want: []error{amqpmsg.ErrUnsupportedValue}},
		{name: "bad time", d: amqp.Delivery{MessageId: id, Headers: amqp.Table{"cloudEvents:time": "noon"}}, want: []error{inbox.ErrInvalidTime}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := amqpmsg.FromDelivery(tc.d)
			if tc.want == nil {
				if err != nil || !tc.check(got) {
					t.Fatalf("FromDelivery = %+v, %v", got, err)
				}
				return
			}
			inboxtest.WantParseError(t, err, tc.want, tc.header)
		})
	}
}

func FuzzFromDelivery(f *testing.F) {
	f.Add(id, "2", int64(3), "2026-03-04T05:06:07Z", "")
	f.Add("", "", int64(0), "", id)
	f.Add("x", "-1", int64(-5), "bad", "y")
	f.Fuzz(func(t *testing.T, ceID, schema string, schemaNum int64, ts, messageID string) {
		h := amqp.Table{}
		if ceID != "" {
			h["cloudEvents:id"] = ceID
		}
		if schema != "" {
			h["cloudEvents:schemaversion"] = schema
		} else if schemaNum != 0 {
			h["cloudEvents_schemaversion"] = schemaNum
		}
		if ts != "" {
			h["cloudEvents:time"] = ts
		}
		m, err := amqpmsg.FromDelivery(amqp.Delivery{Headers: h, MessageId: messageID})
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
