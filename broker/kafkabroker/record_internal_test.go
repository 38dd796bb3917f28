package kafkabroker

import (
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// recordSize (what Check counts, before a record exists) and batchSize
// (what Publish counts, on the record it built) agree.
func TestRecordSizeMatchesTheBuiltRecord(t *testing.T) {
	b := &Broker{cfg: Config{Source: "/s", MaxMessage: 1 << 30}}
	for _, e := range []outbox.Event{
		{CreatedAt: time.Now(), Message: outbox.Message{EventID: outbox.NewEventID(), Topic: "t", Type: "T", Payload: make([]byte, 300)}.Normalized()},
		{Message: outbox.Message{EventID: outbox.NewEventID(), Topic: "t", Key: "k", Type: "T", AggregateType: "A", SchemaVersion: 7,
			Headers: map[string]string{"a": "1", "long": string(make([]byte, 200))}, Payload: make([]byte, 70_000)}.Normalized()},
	} {
		if e.Headers["long"] != "" {
			e.Headers["long"] = "x"
		}
		var attrs []broker.Attribute
		r, err := b.record(&e, &attrs)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := batchSize(r), recordSize(&e, "/s"); got != want {
			t.Errorf("batchSize %d, recordSize %d", got, want)
		}
	}
}
