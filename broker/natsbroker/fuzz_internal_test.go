package natsbroker

import (
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/inbox/natsmsg"
	"github.com/outbox-go/outbox/internal/testnats"
)

// FuzzNATSRoundTrip: whatever outbox.Validate and Broker.Check accept, the
// adapter builds into a message nats.go sends (no error), and a consumer
// reading it back with inbox/natsmsg gets the same id, type, key, schema
// version, topic, payload and user headers: nothing dropped, trimmed or
// mangled on the way. It publishes on core NATS of an embedded server (one
// per fuzzing process) and reads the message back from a subscription, so
// nats.go's own header encoding and decoding are the ones tested. Topics
// are fuzzed under "fuzz." so that one subscription sees them all.
func FuzzNATSRoundTrip(f *testing.F) {
	f.Add("orders.paid", "order-42", "OrderPaid", "Order", "", 1, []byte(`{}`), "X-Request-Id", "r-1", "traceparent", "00-abc-01")
	f.Add("a", "订单 42 \"q\" 100%", "Type with spaces & ünïcode", "", "text/plain; charset=utf-8", 0, []byte{0, 1, 0xff}, "tenant", "acme ✓ 日本", "Mixed-Case", "Value With Spaces")
	f.Add("x.y.z", "", "T", "", "", 7, []byte(nil), "empty", "", "a!#$%&'*+-.^_`|~z", "tchar")
	f.Add("x", "k", "T", "", "", 0, []byte("x"), "Status", "100", "ce-id", "forged")
	f.Add("x", "k", "T", "", "", 0, []byte("x"), "h", " v", "h2", "v\t")

	srv := testnats.StartPlain(f)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(nc.Close)
	sub, err := nc.SubscribeSync("fuzz.>")
	if err != nil {
		f.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		f.Fatal(err)
	}
	b, err := New(nc, Config{Source: "/fuzz source"})
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, topic, key, typ, aggType, contentType string, version int, payload []byte, k1, v1, k2, v2 string) {
		m := outbox.Message{Topic: "fuzz." + topic, Key: key, Type: typ, AggregateType: aggType, ContentType: contentType,
			SchemaVersion: version, Payload: payload}
		if k1 != "" || k2 != "" {
			m.Headers = map[string]string{k1: v1, k2: v2}
		}
		if outbox.Validate(outbox.Limits{}, m) != nil {
			return
		}
		m = m.Normalized()
		if b.Check(m) != nil {
			return
		}
		e := outbox.Event{ID: 1, CreatedAt: time.Now(), Message: m}
		bt := b.newBatch()
		msg, err := bt.message([]outbox.Event{e}, 0)
		if err != nil {
			t.Fatalf("Validate and Check accepted %+v, but building its message failed: %v", m, err)
		}
		if err := nc.PublishMsg(msg); err != nil {
			t.Fatalf("nats.go refused the message of %+v: %v", m, err)
		}
		got, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("the message of %+v did not arrive: %v", m, err)
		}
		in, err := natsmsg.FromMsg(got)
		if err != nil {
			t.Fatalf("natsmsg could not read the message of %+v back: %v (headers %v)", m, err, got.Header)
		}
		if in.EventID != m.EventID || in.Type != m.Type || in.Key != m.Key || in.SchemaVersion != m.SchemaVersion ||
			in.AggregateType != m.AggregateType || in.ContentType != m.ContentType || in.Topic != m.Topic ||
			string(in.Payload) != string(m.Payload) || in.Source != "/fuzz source" {
			t.Fatalf("round trip of %+v came back as %+v", m, in)
		}
		want := m.Headers
		if len(want) == 0 {
			want = nil
		}
		if len(in.Headers) != 0 || len(want) != 0 {
			if !maps.Equal(in.Headers, want) {
				t.Fatalf("headers %q came back as %q", want, in.Headers)
			}
		}
	})
}
