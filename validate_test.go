package outbox_test

import (
	"errors"
	"strings"
	"testing"

	outbox "github.com/outbox-go/outbox"
)

func valid() outbox.Message {
	return outbox.Message{Topic: "orders.paid", Key: "order-42", Type: "OrderPaid", Payload: []byte(`{}`)}
}

func TestValidateRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		edit  func(*outbox.Message)
		want  error
		field string
		says  string // part of the message
	}{
		{"empty topic", func(m *outbox.Message) { m.Topic = "" }, outbox.ErrEmptyTopic, "Topic", "set Message.Topic"},
		{"empty type", func(m *outbox.Message) { m.Type = "" }, outbox.ErrEmptyType, "Type", "CloudEvents requires a non-empty type"},
		{"TAB in topic", func(m *outbox.Message) { m.Topic = "orders\tpaid" }, outbox.ErrInvalidText, "Topic", "U+0009"},
		{"LF in key", func(m *outbox.Message) { m.Key = "order\n42" }, outbox.ErrInvalidText, "Key", "U+000A at byte 5"},
		{"NUL in type", func(m *outbox.Message) { m.Type = "Order\x00" }, outbox.ErrInvalidText, "Type", "U+0000"},
		{"DEL in aggregate type", func(m *outbox.Message) { m.AggregateType = "Order\x7f" }, outbox.ErrInvalidText, "AggregateType", "U+007F"},
		{"C1 control in content type", func(m *outbox.Message) { m.ContentType = "text/plain\u0085" }, outbox.ErrInvalidText, "ContentType", "U+0085"},
		{"U+009F in type", func(m *outbox.Message) { m.Type = "a\u009f" }, outbox.ErrInvalidText, "Type", "U+009F"},
		{"noncharacter in key", func(m *outbox.Message) { m.Key = "k\uFFFE" }, outbox.ErrInvalidText, "Key", "noncharacter U+FFFE"},
		{"noncharacter U+FDD0 in type", func(m *outbox.Message) { m.Type = "\uFDD0" }, outbox.ErrInvalidText, "Type", "noncharacter"},
		{"invalid UTF-8 in type", func(m *outbox.Message) { m.Type = "Order\xff" }, outbox.ErrInvalidText, "Type", "not valid UTF-8"},
		{"type too long", func(m *outbox.Message) { m.Type = strings.Repeat("t", 256) }, outbox.ErrFieldTooLong, "Type", "256 characters"},
		{"negative schema version", func(m *outbox.Message) { m.SchemaVersion = -1 }, outbox.ErrInvalidMessage, "SchemaVersion", "it is -1"},
		{"event id not a UUID", func(m *outbox.Message) { m.EventID = "42" }, outbox.ErrInvalidEventID, "EventID", "xxxxxxxx-"},
		{"header name with a space", func(m *outbox.Message) { m.Headers = map[string]string{"a b": "v"} }, outbox.ErrInvalidHeader, `Headers["a b"]`, "HTTP tokens"},
		{"header name with a colon", func(m *outbox.Message) { m.Headers = map[string]string{"a:b": "v"} }, outbox.ErrInvalidHeader, `Headers["a:b"]`, "HTTP tokens"},
		{"non-ASCII header name", func(m *outbox.Message) { m.Headers = map[string]string{"tënant": "v"} }, outbox.ErrInvalidHeader, "Headers", "HTTP tokens"},
		{"empty header name", func(m *outbox.Message) { m.Headers = map[string]string{"": "v"} }, outbox.ErrInvalidHeader, `Headers[""]`, "must not be empty"},
		{"long header name", func(m *outbox.Message) { m.Headers = map[string]string{strings.Repeat("h", 256): "v"} }, outbox.ErrInvalidHeader, "Headers", "255 bytes"},
		{"CR LF in a header value", func(m *outbox.Message) { m.Headers = map[string]string{"h": "a\r\nNats-Rollup: all"} }, outbox.ErrInvalidHeader, `Headers["h"]`, "control characters"},
		{"TAB in a header value", func(m *outbox.Message) { m.Headers = map[string]string{"h": "a\tb"} }, outbox.ErrInvalidHeader, `Headers["h"]`, "control characters"},
		{"DEL in a header value", func(m *outbox.Message) { m.Headers = map[string]string{"h": "a\x7f"} }, outbox.ErrInvalidHeader, `Headers["h"]`, "control characters"},
		{"leading space in a header value", func(m *outbox.Message) { m.Headers = map[string]string{"h": " v"} }, outbox.ErrInvalidHeader, `Headers["h"]`, "trim them"},
		{"trailing space in a header value", func(m *outbox.Message) { m.Headers = map[string]string{"h": "v "} }, outbox.ErrInvalidHeader, `Headers["h"]`, "trim them"},
		{"invalid UTF-8 in a header value", func(m *outbox.Message) { m.Headers = map[string]string{"h": "\xff"} }, outbox.ErrInvalidHeader, `Headers["h"]`, "base64"},
		{"headers too large", func(m *outbox.Message) {
			m.Headers = map[string]string{"h": strings.Repeat("v", outbox.MaxHeaderBytes)}
		}, outbox.ErrInvalidHeader, "Headers", "keep them under"},
		{"payload too large", func(m *outbox.Message) { m.Payload = make([]byte, outbox.DefaultMaxPayload+1) }, outbox.ErrPayloadTooLarge, "Payload", "1048577 bytes"},

		// Reserved names, each with the transport that owns it.
		{"Content-Type", func(m *outbox.Message) { m.Headers = map[string]string{"Content-Type": "application/cloudevents+json"} }, outbox.ErrReservedHeader, `Headers["Content-Type"]`, "reserved by all transports: the event's content type travels as its datacontenttype attribute"},
		{"content-type lower case", func(m *outbox.Message) { m.Headers = map[string]string{"content-type": "x"} }, outbox.ErrReservedHeader, "Headers", "set Message.ContentType instead"},
		{"NATS Status", func(m *outbox.Message) { m.Headers = map[string]string{"Status": "100"} }, outbox.ErrReservedHeader, "Headers", "reserved by NATS: nats.go takes a message with a Status header for a control message"},
		{"NATS Description", func(m *outbox.Message) { m.Headers = map[string]string{"description": "x"} }, outbox.ErrReservedHeader, "Headers", "reserved by NATS"},
		{"Nats-Msg-Id", func(m *outbox.Message) { m.Headers = map[string]string{"Nats-Msg-Id": "x"} }, outbox.ErrReservedHeader, "Headers", "reserved by NATS: JetStream"},
		{"NATS-ROLLUP", func(m *outbox.Message) { m.Headers = map[string]string{"NATS-ROLLUP": "all"} }, outbox.ErrReservedHeader, "Headers", "reserved by NATS"},
		{"ce-type", func(m *outbox.Message) { m.Headers = map[string]string{"ce-type": "forged"} }, outbox.ErrReservedHeader, "Headers", "reserved by NATS and HTTP"},
		{"CE-ID", func(m *outbox.Message) { m.Headers = map[string]string{"CE-ID": "forged"} }, outbox.ErrReservedHeader, "Headers", "reserved by NATS and HTTP"},
		{"ce_id", func(m *outbox.Message) { m.Headers = map[string]string{"ce_id": "forged"} }, outbox.ErrReservedHeader, "Headers", "reserved by Kafka"},
		{"cloudEvents_id", func(m *outbox.Message) { m.Headers = map[string]string{"cloudEvents_id": "forged"} }, outbox.ErrReservedHeader, "Headers", "reserved by AMQP"},
		{"webhook-signature", func(m *outbox.Message) { m.Headers = map[string]string{"webhook-signature": "v1,x"} }, outbox.ErrReservedHeader, "Headers", "reserved by HTTP: Standard Webhooks"},
		{"Content-Length", func(m *outbox.Message) { m.Headers = map[string]string{"Content-Length": "1"} }, outbox.ErrReservedHeader, "Headers", "reserved by HTTP"},
		{"x-death", func(m *outbox.Message) { m.Headers = map[string]string{"x-death": "1"} }, outbox.ErrReservedHeader, "Headers", "reserved by AMQP: RabbitMQ"},
		{"CC", func(m *outbox.Message) { m.Headers = map[string]string{"CC": "audit"} }, outbox.ErrReservedHeader, "Headers", "reserved by AMQP"},
		{"JMSXGroupID", func(m *outbox.Message) { m.Headers = map[string]string{"JMSXGroupID": "g"} }, outbox.ErrReservedHeader, "Headers", "reserved by AMQP: JMS"},
		{"kafka_", func(m *outbox.Message) { m.Headers = map[string]string{"kafka_dlt-topic": "x"} }, outbox.ErrReservedHeader, "Headers", "reserved by Kafka: Spring"},
		{"__TypeId__", func(m *outbox.Message) { m.Headers = map[string]string{"__TypeId__": "com.acme.Evil"} }, outbox.ErrReservedHeader, "Headers", "reserved by Kafka: Spring's JsonDeserializer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := valid()
			tc.edit(&m)
			err := outbox.Validate(outbox.Limits{}, valid(), m)
			var ve *outbox.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate = %v; want a *ValidationError", err)
			}
			if !errors.Is(err, tc.want) || !errors.Is(err, outbox.ErrInvalidMessage) {
				t.Errorf("Validate = %v; want it to wrap %v and ErrInvalidMessage", err, tc.want)
			}
			if ve.Index != 1 || !strings.HasPrefix(ve.Field, tc.field) {
				t.Errorf("Index %d, Field %q; want 1, %q", ve.Index, ve.Field, tc.field)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("message %q does not say %q", err, tc.says)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("message %q is not one line", err)
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*outbox.Message)
	}{
		{"the minimum", func(m *outbox.Message) { m.Key, m.Payload = "", nil }},
		{"application headers, x- ones included", func(m *outbox.Message) {
			m.Headers = map[string]string{"X-Request-Id": "r-1", "x-b3-traceid": "abc", "X-Forwarded-For": "10.0.0.1", "traceparent": "00-abc-01",
				"tenant": "acme ✓ 日本", "empty": "", "Mixed-Case": "Value With Spaces", "a!#$%&'*+-.^_`|~z": "tchar"}
		}},
		{"names that only start like reserved ones", func(m *outbox.Message) {
			m.Headers = map[string]string{"statuses": "1", "content-types": "2", "cert": "3", "nats": "4", "ccx": "5", "hostname": "6", "x-deathly": "7"}
		}},
		{"Unicode text", func(m *outbox.Message) { m.Key, m.Type = "订单 42 \"q\" 100%", "Type with spaces, ünïcode & 😀" }},
		{"U+00A0 is not a control character", func(m *outbox.Message) { m.Type = "a\u00a0b" }},
		{"a positive schema version", func(m *outbox.Message) { m.SchemaVersion = 3 }},
		{"a given UUID", func(m *outbox.Message) { m.EventID = "0192F6C4-8A59-7C3E-9F3B-6A1E2D3C4B5A" }},
		{"a payload of exactly the limit", func(m *outbox.Message) { m.Payload = make([]byte, outbox.DefaultMaxPayload) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := valid()
			tc.edit(&m)
			if err := outbox.Validate(outbox.Limits{}, m); err != nil {
				t.Errorf("Validate = %v; want nil", err)
			}
		})
	}
}

func TestIsReservedHeader(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"Content-Type": true, "CONTENT-TYPE": true, "Status": true, "Description": true, "Nats-Msg-Id": true,
		"ce-id": true, "ce_id": true, "cloudEvents:id": true, "webhook-id": true, "x-death": true,
		"X-Request-Id": false, "x-custom": false, "traceparent": false, "Content": false, "stat": false,
	} {
		if got := outbox.IsReservedHeader(name); got != want {
			t.Errorf("IsReservedHeader(%q) = %v, want %v", name, got, want)
		}
	}
}
