package natsbroker_test

import (
	"context"
	"fmt"
	"log"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/store"
)

// Dial a NATS server with JetStream and publish a batch. A stream must
// capture the subject ("nats stream add ORDERS --subjects 'orders.>'").
// Not run by go test: it needs a server.
func Example() {
	b, err := natsbroker.Dial("nats://127.0.0.1:4222", natsbroker.Config{
		Source:  "/order-service",
		Timeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(context.Background())

	events := []outbox.Event{{ID: 1, Message: outbox.Message{
		EventID: outbox.NewEventID(), Topic: "orders.paid", Key: "order-42",
		Type: "OrderPaid", Payload: []byte(`{"id":42}`),
	}}}
	for i, err := range b.Publish(context.Background(), events) {
		switch {
		case err == nil:
			fmt.Println("stored by JetStream:", events[i].EventID)
		case broker.IsPermanent(err):
			fmt.Println("will never succeed:", err)
		default:
			fmt.Println("retry later:", err)
		}
	}
}

// Refuse at enqueue what NATS would refuse at the relay: a topic that is
// not a subject one can publish to, or a payload that does not fit
// max_payload with its headers. Not run by go test: it needs a server.
func ExampleBroker_Check() {
	b, err := natsbroker.Dial("nats://127.0.0.1:4222", natsbroker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(context.Background())
	opts := store.Options{Check: b.Check} // pass to pgstore.Config{Options: opts}, …
	err = opts.Check(outbox.Message{Topic: "orders paid", Type: "OrderPaid"})
	fmt.Println(err)
	// outbox: message 0: Topic: topic is not a NATS subject one can publish to; byte 6 is a space or control character (' '), …
}
