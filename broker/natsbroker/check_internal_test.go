package natsbroker

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testenv"
)

func TestSubjectProblem(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"orders", "orders.paid", "a.b-c_d.E9", "ünï.cödé", "orders.a*b", "orders.>x", "$app.x"} {
		if why := subjectProblem(s); why != "" {
			t.Errorf("subjectProblem(%q) = %q; want it accepted", s, why)
		}
	}
	for s, want := range map[string]string{
		"":             "empty",
		"orders paid":  "space or control character",
		"orders\tpaid": "space or control character",
		"orders\x7f":   "space or control character",
		"orders.*":     "wildcard",
		"orders.>":     "wildcard",
		"*":            "wildcard",
		">":            "wildcard",
		"*.paid":       "wildcard",
		"orders..paid": "empty token",
		".orders":      "empty token",
		"orders.":      "empty token",
		".":            "empty token",
	} {
		if why := subjectProblem(s); !strings.Contains(why, want) {
			t.Errorf("subjectProblem(%q) = %q; want it to say %q", s, why, want)
		}
	}
}

// message sizes the header block exactly as nats.go counts it, so the
// check before sending and nats.go's own agree to the byte.
func TestHeaderSizeMatchesNatsGo(t *testing.T) {
	t.Parallel()
	b := &Broker{source: "outbox"}
	bt := &batch{source: b.source, header: make(nats.Header), attrs: nil}
	e := outbox.Event{ID: 1, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC), Message: outbox.Message{
		EventID: outbox.NewEventID(), Topic: "orders.paid", Key: "order 42 ü", Type: "OrderPaid", AggregateType: "Order",
		SchemaVersion: 3, ContentType: "application/json", Payload: []byte("{}"),
		Headers: map[string]string{"traceparent": "00-abc-01", "X-Request-Id": "r-1", "tenant": "acme ✓"},
	}}
	m, err := bt.message([]outbox.Event{e}, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := m.Size() - len(m.Subject) - len(m.Reply) - len(m.Data) // nats.go's own count of the header block
	if got := headerSize(&e, b.source); got != want {
		t.Errorf("headerSize = %d, nats.go counts %d", got, want)
	}
}

// BenchmarkMessage measures building one NATS message, checks included:
// the per-event CPU and allocations the publish path spends before
// nats.go.
func BenchmarkMessage(b *testing.B) {
	url := testenv.Require(b, testenv.NATS)
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	br, err := New(nc, Config{})
	if err != nil {
		b.Fatal(err)
	}
	events := make([]outbox.Event, 1000)
	for i := range events {
		m := outbox.Message{Topic: "bench.orders", Key: "order-42", Type: "OrderPaid", Payload: []byte(`{"order_id":42}`),
			Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme"}}
		events[i] = outbox.Event{ID: int64(i + 1), Message: m.Normalized(), CreatedAt: time.Now()}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bt := br.newBatch()
		for j := range events {
			if _, err := bt.message(events, j); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
}
