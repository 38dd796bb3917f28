package kafkamsg_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/inbox/inboxtest"
	"github.com/outbox-go/outbox/inbox/kafkamsg"
)

const id = "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a"

// relayRecord encodes e the way the CloudEvents Kafka binding (binary
// mode) does: ce_ headers with UTF-8 values, content-type for
// datacontenttype, record key = event key.
func relayRecord(e outbox.Event) *kgo.Record {
	r := &kgo.Record{Topic: e.Topic, Key: []byte(e.Key), Value: e.Payload}
	for _, a := range broker.CloudEventAttributes(e, "billing") {
		if a.Name == broker.AttrDataContentType {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "content-type", Value: []byte(a.Value)})
			continue
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "ce_" + a.Name, Value: []byte(a.Value)})
	}
	for k, v := range e.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return r
}

func TestFromRecordRoundTrip(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 3, 4, 5, 6, 7, 8000, time.UTC)
	e := outbox.Event{ID: 7, CreatedAt: created, Message: outbox.Message{
		EventID: id, Topic: "orders", Key: "订单 42", Type: "Order Paid",
		AggregateType: "Order", SchemaVersion: 2, ContentType: "application/json",
		Payload: []byte(`{"id":42}`), Headers: map[string]string{"tenant": "acme"},
	}}
	got, err := kafkamsg.FromRecord(relayRecord(e))
	if err != nil {
		t.Fatal(err)
	}
	if got.EventID != id || got.Type != "Order Paid" || got.Key != "订单 42" || got.SchemaVersion != 2 ||
		got.AggregateType != "Order" || got.Source != "billing" || got.ContentType != "application/json" ||
		got.Topic != "orders" || string(got.Payload) != `{"id":42}` || !got.Time.Equal(created) {
		t.Errorf("FromRecord = %+v", got)
	}
	if len(got.Headers) != 1 || got.Headers["tenant"] != "acme" {
		t.Errorf("Headers = %v, want only tenant=acme", got.Headers)
	}
	if _, err := kafkamsg.FromRecord(nil); err == nil {
		t.Error("FromRecord(nil) succeeded")
	}
}

func hdrs(kv ...string) []kgo.RecordHeader {
	var out []kgo.RecordHeader
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return out
}

func TestFromParts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		key    string
		h      []kgo.RecordHeader
		check  func(inbox.Message) bool
		want   []error
		header string
	}{
		{name: "record key is the event key", key: "order-1", h: hdrs("ce_id", id),
			check: func(m inbox.Message) bool { return m.Key == "order-1" && m.SchemaVersion == 1 }},
		{name: "ce_partitionkey wins", key: "other", h: hdrs("ce_id", id, "ce_partitionkey", "order-1"),
			check: func(m inbox.Message) bool { return m.Key == "order-1" }},
		{name: "names are case-insensitive", h: hdrs("CE_ID", strings.ToUpper(id), "Ce_SchemaVersion", "4"),
			check: func(m inbox.Message) bool { return m.EventID == id && m.SchemaVersion == 4 }},
		{name: "content-type wins over ce_datacontenttype", h: hdrs("ce_id", id, "ce_datacontenttype", "text/plain", "content-type", "application/avro"),
			check: func(m inbox.Message) bool { return m.ContentType == "application/avro" }},
		{name: "ce_datacontenttype alone", h: hdrs("ce_id", id, "ce_datacontenttype", "text/plain"),
			check: func(m inbox.Message) bool { return m.ContentType == "text/plain" }},
		{name: "values are not percent-decoded", h: hdrs("ce_id", id, "ce_type", "100%25"),
			check: func(m inbox.Message) bool { return m.Type == "100%25" }},
		{name: "extensions", h: hdrs("ce_id", id, "ce_subject", "42", "ce_traceparent", "00-x-01"),
			check: func(m inbox.Message) bool {
				return m.Extensions["subject"] == "42" && m.Extensions["traceparent"] == "00-x-01" && len(m.Headers) == 0
			}},
		{name: "repeated user header keeps the first", h: hdrs("ce_id", id, "tenant", "a", "tenant", "b"),
			check: func(m inbox.Message) bool { return m.Headers["tenant"] == "a" }},

		{name: "no id", key: "k", h: hdrs("ce_type", "OrderPaid"), want: []error{inbox.ErrMissingEventID}},
		{name: "structured mode", h: hdrs("content-type", "application/cloudevents+json; charset=UTF-8"), want: []error{inbox.ErrMissingEventID}},
		{name: "id not a uuid", h: hdrs("ce_id", "1234-1234-1234"), want: []error{inbox.ErrMalformedHeader, inbox.ErrInvalidEventID}, header: "ce_id"},
		{name: "empty id", h: hdrs("ce_id", ""), want: []error{inbox.ErrMalformedHeader, inbox.ErrMissingEventID}, header: "ce_id"},
		{name: "conflicting ids", h: hdrs("ce_id", id, "ce_id", "0192f6c4-0000-7000-8000-000000000000"), want: []error{inbox.ErrMalformedHeader}, header: "ce_id"},
		{name: "schema version word", h: hdrs("ce_id", id, "ce_schemaversion", "v2"), want: []error{inbox.ErrMalformedHeader, inbox.ErrInvalidSchemaVersion}, header: "ce_schemaversion"},
		{name: "schema version overflow", h: hdrs("ce_id", id, "ce_schemaversion", "99999999999999999999"), want: []error{inbox.ErrInvalidSchemaVersion}},
		{name: "schema version plus sign", h: hdrs("ce_id", id, "ce_schemaversion", "+2"), want: []error{inbox.ErrInvalidSchemaVersion}},
		{name: "bad time", h: hdrs("ce_id", id, "ce_time", "2026-13-01T00:00:00Z"), want: []error{inbox.ErrInvalidTime}, header: "ce_time"},
		{name: "invalid utf-8", h: hdrs("ce_id", id, "ce_type", "Order\xff"), want: []error{inbox.ErrMalformedHeader, inbox.ErrInvalidText}, header: "ce_type"},
		{name: "nul byte", h: hdrs("ce_id", id, "ce_partitionkey", "a\x00b"), want: []error{inbox.ErrInvalidText}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := kafkamsg.FromParts("orders", []byte(tc.key), tc.h, []byte("v"))
			if tc.want == nil {
				if err != nil || !tc.check(got) {
					t.Fatalf("FromParts = %+v, %v", got, err)
				}
				return
			}
			inboxtest.WantParseError(t, err, tc.want, tc.header)
		})
	}
}

func TestLongValueIsShortenedInError(t *testing.T) {
	t.Parallel()
	_, err := kafkamsg.FromParts("t", nil, hdrs("ce_id", strings.Repeat("x", 10000)), nil)
	if !errors.Is(err, inbox.ErrInvalidEventID) || len(err.Error()) > 400 {
		t.Errorf("error (%d bytes) = %v", len(err.Error()), err)
	}
}

func FuzzFromParts(f *testing.F) {
	f.Add([]byte(id), []byte("2"), []byte("k"), []byte("2026-03-04T05:06:07Z"), []byte("ce_id"))
	f.Add([]byte(""), []byte(""), []byte(""), []byte(""), []byte("x"))
	f.Add([]byte("\xff"), []byte("-1"), []byte("\x00"), []byte("bad"), []byte("CE_SCHEMAVERSION"))
	f.Fuzz(func(t *testing.T, ceID, schema, key, ts, extraName []byte) {
		h := []kgo.RecordHeader{
			{Key: "ce_id", Value: ceID},
			{Key: "ce_schemaversion", Value: schema},
			{Key: "ce_time", Value: ts},
			{Key: string(extraName), Value: key},
		}
		m, err := kafkamsg.FromParts("t", key, h, nil)
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
