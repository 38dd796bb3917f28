package redisbroker_test

import (
	"context"
	"fmt"
	"log"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/redisbroker"
)

// Dial Redis, keep each stream to about 100,000 entries, and publish an
// event twice: the second time Redis recognises it. Not run by go test: it
// needs a server.
func Example() {
	b, err := redisbroker.Dial("redis://127.0.0.1:6379/0?maxlen=100000", redisbroker.Config{Source: "/order-service"})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(context.Background())

	events := []outbox.Event{{ID: 1, Message: outbox.Message{
		EventID: outbox.NewEventID(), Topic: "orders", Key: "order-42",
		Type: "OrderPaid", Payload: []byte(`{"id":42}`),
	}}}
	for range 2 {
		for _, r := range b.PublishResults(context.Background(), events) {
			switch {
			case r.Err == nil:
				fmt.Println("stored in", r.Stream, "as", r.ID, "duplicate:", r.Duplicate)
			case broker.IsPermanent(r.Err):
				fmt.Println("will never succeed:", r.Err)
			default:
				fmt.Println("retry later:", r.Err)
			}
		}
	}
}
