package mqttbroker_test

import (
	"context"
	"fmt"
	"log"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/mqttbroker"
	"github.com/outbox-go/outbox/store"
)

// Dial an MQTT 5 server and publish a batch at QoS 1. Not run by go test:
// it needs a server.
func Example() {
	b, err := mqttbroker.Dial("mqtt://127.0.0.1:1883", mqttbroker.Config{
		ClientID: "orders-relay-1",
		Source:   "/order-service",
		Timeout:  5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(context.Background())

	events := []outbox.Event{{ID: 1, Message: outbox.Message{
		EventID: outbox.NewEventID(), Topic: "orders/paid", Key: "order-42",
		Type: "OrderPaid", Payload: []byte(`{"id":42}`),
	}}}
	for i, err := range b.Publish(context.Background(), events) {
		switch {
		case err == nil:
			fmt.Println("PUBACK:", events[i].EventID)
		case broker.IsPermanent(err):
			fmt.Println("will never succeed:", err)
		default:
			fmt.Println("retry later:", err)
		}
	}
}

// Refuse at enqueue what the server would refuse: a wildcard in the topic,
// a header named like a CloudEvents attribute, a packet over the server's
// maximum. Not run by go test: it needs a server.
func ExampleBroker_Check() {
	b, err := mqttbroker.Dial("mqtt://127.0.0.1:1883", mqttbroker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(context.Background())
	opts := store.Options{Check: b.Check} // pass to pgstore.Config{Options: opts}, …
	err = opts.Check(outbox.Message{Topic: "orders/#", Type: "OrderPaid"})
	fmt.Println(err)
}
