package broker_test

import (
	"errors"
	"strings"
	"testing"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// FuzzValidate: outbox.Validate never panics, refuses with a one-line
// *ValidationError, and whatever it accepts every adapter's publish-time
// check accepts too (broker.CheckEvent with every transport's reserved
// names), so an event that passed Enqueue is never refused at the relay
// for its attributes or headers. The NATS round trip of what it accepts is
// fuzzed in broker/natsbroker (FuzzNATSRoundTrip).
func FuzzValidate(f *testing.F) {
	f.Add("orders.paid", "order-42", "OrderPaid", "Order", "", 1, []byte(`{}`), "", "X-Request-Id", "r-1", "traceparent", "00-abc-01")
	f.Add("orders", "订单 42", "Type with spaces", "", "text/plain; charset=utf-8", 0, []byte{}, "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a", "Content-Type", "x", "Status", "100")
	f.Add("t", "k\tk", "T\u0085", "A\x7f", "c\x00", -1, []byte(nil), "nope", "a b", " v", "ce-id", "forged")
	f.Add("t", "k", "T", "", "", 2, []byte("x"), "", "tënant", "v\r\n", "x-death", "1")
	f.Add("t", "\uFFFE", "\xff", "", "", 0, []byte("x"), "", "", "", "h", "v ")
	f.Fuzz(func(t *testing.T, topic, key, typ, aggType, contentType string, version int, payload []byte, eventID, k1, v1, k2, v2 string) {
		m := outbox.Message{EventID: eventID, Topic: topic, Key: key, Type: typ, AggregateType: aggType, ContentType: contentType,
			SchemaVersion: version, Payload: payload}
		if k1 != "" || k2 != "" {
			m.Headers = map[string]string{k1: v1, k2: v2}
		}
		err := outbox.Validate(outbox.Limits{}, m)
		if err != nil {
			var ve *outbox.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, outbox.ErrInvalidMessage) {
				t.Fatalf("Validate = %v (%T); want a *ValidationError", err, err)
			}
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("error is not one line: %q", err)
			}
			return
		}
		e := outbox.Event{ID: 1, Message: m.Normalized()}
		if err := broker.CheckEvent("", &e); err != nil {
			t.Fatalf("Validate accepted %+v, but an adapter would refuse it at publish: %v", m, err)
		}
		for _, tr := range []broker.Transport{broker.NATS, broker.Kafka, broker.AMQP, broker.HTTP} {
			if err := broker.CheckHeaders(tr, e.Headers); err != nil {
				t.Fatalf("Validate accepted headers %v that %s refuses: %v", e.Headers, tr, err)
			}
		}
	})
}
