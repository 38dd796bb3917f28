package mqttmsg_test

import (
	"errors"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/inbox/mqttmsg"
)

const id = "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a"

func TestFromPublish(t *testing.T) {
	t.Parallel()
	stamp := time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC)
	for _, tc := range []struct {
		name  string
		p     *paho.Publish
		check func(inbox.Message) bool
		want  error
	}{
		{name: "all attributes", p: &paho.Publish{Topic: "t", Payload: []byte("x"), Properties: &paho.PublishProperties{
			ContentType: "text/plain",
			User: paho.UserProperties{{Key: "id", Value: id}, {Key: "source", Value: "/billing"}, {Key: "specversion", Value: "1.0"},
				{Key: "type", Value: "OrderPaid"}, {Key: "time", Value: "2026-01-02T03:04:05.6Z"}, {Key: "partitionkey", Value: "k 1"},
				{Key: "schemaversion", Value: "3"}, {Key: "aggregatetype", Value: "Order"}, {Key: "X-Request-Id", Value: "r-1"}, {Key: "tenant", Value: "a"}, {Key: "tenant", Value: "b"}}}},
			check: func(m inbox.Message) bool {
				return m.EventID == id && m.Source == "/billing" && m.Type == "OrderPaid" && m.Time.Equal(stamp) && m.Key == "k 1" &&
					m.SchemaVersion == 3 && m.AggregateType == "Order" && m.ContentType == "text/plain" && m.Topic == "t" &&
					string(m.Payload) == "x" && len(m.Headers) == 2 && m.Headers["X-Request-Id"] == "r-1" && m.Headers["tenant"] == "a"
			}},
		{name: "attribute case ignored", p: &paho.Publish{Properties: &paho.PublishProperties{User: paho.UserProperties{{Key: "ID", Value: id}}}},
			check: func(m inbox.Message) bool { return m.EventID == id && m.SchemaVersion == 1 && len(m.Headers) == 0 }},
		{name: "datacontenttype property wins", p: &paho.Publish{Properties: &paho.PublishProperties{ContentType: "a/b", User: paho.UserProperties{{Key: "id", Value: id}, {Key: "datacontenttype", Value: "c/d"}}}},
			check: func(m inbox.Message) bool { return m.ContentType == "c/d" }},
		{name: "no properties", p: &paho.Publish{Topic: "t"}, want: inbox.ErrMissingEventID},
		{name: "bad id", p: &paho.Publish{Properties: &paho.PublishProperties{User: paho.UserProperties{{Key: "id", Value: "nope"}}}}, want: inbox.ErrMalformedHeader},
		{name: "bad schema version", p: &paho.Publish{Properties: &paho.PublishProperties{User: paho.UserProperties{{Key: "id", Value: id}, {Key: "schemaversion", Value: "x"}}}}, want: inbox.ErrMalformedHeader},
		{name: "conflicting ids", p: &paho.Publish{Properties: &paho.PublishProperties{User: paho.UserProperties{{Key: "id", Value: id}, {Key: "id", Value: "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5b"}}}}, want: inbox.ErrMalformedHeader},
		{name: "structured mode", p: &paho.Publish{Properties: &paho.PublishProperties{ContentType: "application/cloudevents+json"}}, want: inbox.ErrMissingEventID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := mqttmsg.FromPublish(tc.p)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil || !tc.check(m) {
				t.Fatalf("FromPublish = %+v, %v", m, err)
			}
		})
	}
	if _, err := mqttmsg.FromPublish(nil); err == nil {
		t.Error("FromPublish(nil) succeeded")
	}
}
