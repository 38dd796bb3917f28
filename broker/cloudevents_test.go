package broker_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

func TestPercentEncode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a", "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a"},
		{"OrderPaid", "OrderPaid"},
		{"Euro € 😀", "Euro%20%E2%82%AC%20%F0%9F%98%80"}, // the binding's own example
		{`a "quoted" 100%`, "a%20%22quoted%22%20100%25"},
		{"tab\tdel\x7f", "tab%09del%7F"},
	} {
		if got := broker.PercentEncode(tc.in); got != tc.want {
			t.Errorf("PercentEncode(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPercentDecode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"Euro%20%E2%82%AC%20%F0%9F%98%80", "Euro € 😀"},
		{"lower%e2%82%ac", "lower€"},
		{"%41%42", "AB"}, // unnecessary escapes are accepted
		{`"quoted \"value\" here"`, `quoted "value" here`},
		{"plain", "plain"},
	} {
		got, err := broker.PercentDecode(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("PercentDecode(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"%C0%A0", "%", "%4", "%zz", "%FF"} {
		if got, err := broker.PercentDecode(bad); !errors.Is(err, broker.ErrBadPercentEncoding) {
			t.Errorf("PercentDecode(%q) = %q, %v; want ErrBadPercentEncoding", bad, got, err)
		}
	}
}

func FuzzPercentEncoding(f *testing.F) {
	for _, s := range []string{"", "a b", "€", "%25", `"x"`, "\x00\x1f\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		enc := broker.PercentEncode(s)
		for i := 0; i < len(enc); i++ {
			if c := enc[i]; c <= 0x20 || c >= 0x7f || c == '"' {
				t.Fatalf("PercentEncode(%q) = %q keeps byte %#x", s, enc, c)
			}
		}
		dec, err := broker.PercentDecode(enc)
		if !utf8.ValidString(s) {
			if err == nil {
				t.Fatalf("PercentDecode accepted invalid UTF-8 from %q", s)
			}
			return
		}
		if err != nil || dec != s {
			t.Fatalf("round trip of %q: %q, %v", s, dec, err)
		}
	})
}

func TestCloudEventAttributes(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 3, 4, 5, 6, 7, 8000, time.FixedZone("x", 3600))
	e := outbox.Event{ID: 7, CreatedAt: created, Message: outbox.Message{
		EventID: "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a", Topic: "orders", Key: "order-42",
		Type: "OrderPaid", AggregateType: "Order", SchemaVersion: 2,
	}}
	want := []broker.Attribute{
		{Name: "id", Value: "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a"},
		{Name: "source", Value: "billing"},
		{Name: "specversion", Value: "1.0"},
		{Name: "type", Value: "OrderPaid"},
		{Name: "time", Value: "2026-03-04T04:06:07.000008Z"},
		{Name: "datacontenttype", Value: "application/json"},
		{Name: "partitionkey", Value: "order-42"},
		{Name: "schemaversion", Value: "2"},
		{Name: "aggregatetype", Value: "Order"},
	}
	if got := broker.CloudEventAttributes(e, "billing"); !reflect.DeepEqual(got, want) {
		t.Errorf("CloudEventAttributes:\n got %v\nwant %v", got, want)
	}

	bare := outbox.Event{Message: outbox.Message{EventID: "id", Topic: "t", ContentType: "text/plain"}}
	var names []string
	for _, a := range broker.CloudEventAttributes(bare, "") {
		names = append(names, a.Name+"="+a.Value)
	}
	if got, want := strings.Join(names, " "), "id=id source=outbox specversion=1.0 datacontenttype=text/plain"; got != want {
		t.Errorf("bare event attributes = %q, want %q", got, want)
	}
}

func TestAppendCloudEventAttributesMatchesCloudEventAttributes(t *testing.T) {
	t.Parallel()
	events := []outbox.Event{
		{CreatedAt: time.Unix(1, 5), Message: outbox.Message{EventID: "a", Topic: "t", Key: "k", Type: "T", AggregateType: "A", SchemaVersion: 7}},
		{Message: outbox.Message{EventID: "b", Topic: "t"}},
	}
	scratch := []broker.Attribute{{Name: "kept", Value: "x"}}
	for _, e := range events {
		got := broker.AppendCloudEventAttributes(scratch[:1], &e, "src")
		if got[0] != (broker.Attribute{Name: "kept", Value: "x"}) {
			t.Errorf("AppendCloudEventAttributes overwrote dst: %v", got)
		}
		if want := broker.CloudEventAttributes(e, "src"); !reflect.DeepEqual(got[1:], want) {
			t.Errorf("AppendCloudEventAttributes(%s):\n got %v\nwant %v", e.EventID, got[1:], want)
		}
		scratch = got
	}
}
