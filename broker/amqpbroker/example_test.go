package amqpbroker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/amqpbroker"
	"github.com/outbox-go/outbox/store"
)

// Dial RabbitMQ and publish a batch through an exchange, the topic as the
// routing key. A queue must be bound for it (EnsureQueue, or `outbox broker
// setup --queue`); otherwise RabbitMQ returns the event and its error says
// so. Not run by go test: it needs a server.
func Example() {
	b, err := amqpbroker.Dial("amqp://guest:guest@127.0.0.1:5672/?exchange=orders", amqpbroker.Config{
		Source:  "/order-service",
		Timeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(context.Background())
	if err := b.EnsureQueue(context.Background(), "shipping", []string{"orders.paid"}); err != nil {
		log.Fatal(err)
	}

	events := []outbox.Event{{ID: 1, Message: outbox.Message{
		EventID: outbox.NewEventID(), Topic: "orders.paid", Key: "order-42",
		Type: "OrderPaid", Payload: []byte(`{"id":42}`),
	}}}
	for i, err := range b.Publish(context.Background(), events) {
		switch {
		case err == nil:
			fmt.Println("confirmed by RabbitMQ:", events[i].EventID)
		case errors.Is(err, amqpbroker.ErrUnroutable):
			fmt.Println("no queue for it yet; the relay retries:", err)
		case broker.IsPermanent(err):
			fmt.Println("will never succeed:", err)
		default:
			fmt.Println("retry later:", err)
		}
	}
}

// Refuse at enqueue what the Broker would refuse at the relay: a routing
// key over 255 bytes, a header AMQP reserves, a message over MaxMessage.
// Not run by go test: it needs a server.
func ExampleBroker_Check() {
	b, err := amqpbroker.Dial("amqp://guest:guest@127.0.0.1:5672/", amqpbroker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(context.Background())
	opts := store.Options{Check: b.Check} // pass to pgstore.Config{Options: opts}, …
	err = opts.Check(outbox.Message{Topic: "orders", Type: "OrderPaid", Headers: map[string]string{"x-death": "1"}})
	fmt.Println(err)
}
