package relay_test

import (
	"context"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store/driver"
)

// Each store × NATS JetStream on the machine's server: everything arrives,
// in order per key, with the event id as Nats-Msg-Id.
func TestDeliversThroughNATSJetStream(t *testing.T) {
	forEachStore(t, func(t *testing.T, st driver.Store, cfg relay.Config) {
		url := testnats.Shared(t)
		s := testnats.NewStream(t, url)
		br, err := natsbroker.Dial(url, natsbroker.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { br.Close(context.Background()) })
		msgs := workload(t, st, s.Topic("orders"), 1200, 25)
		run(t, st, br, cfg)
		waitFor(t, "delivery", 60*time.Second, func() bool { return pending(t, st).Pending() == 0 })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		got, err := s.All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		events := make([]outbox.Event, len(got))
		for i, m := range got {
			events[i] = outbox.Event{Message: outbox.Message{EventID: m.Headers.Get("Nats-Msg-Id"), Key: m.Headers.Get("ce-partitionkey"), Payload: m.Data}}
		}
		checkDelivered(t, msgs, events)
	})
}
