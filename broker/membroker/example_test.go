package membroker_test

import (
	"context"
	"errors"
	"fmt"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
)

// A relay test publishes through a membroker, injects an outage and a
// poison event, and reads back what was delivered.
func Example() {
	ctx := context.Background()
	b, err := membroker.New(membroker.Config{})
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	paid := outbox.Event{ID: 1, Message: outbox.Message{EventID: outbox.NewEventID(), Topic: "orders", Key: "order-42", Type: "OrderPaid", Payload: []byte(`{"id":42}`)}}
	poison := outbox.Event{ID: 2, Message: outbox.Message{EventID: outbox.NewEventID(), Topic: "orders", Key: "order-7", Type: "Bad"}}

	b.SetDown(true)
	res := b.Publish(ctx, []outbox.Event{paid})
	fmt.Println("down:", errors.Is(res[0], membroker.ErrDown), "permanent:", broker.IsPermanent(res[0]))

	b.SetDown(false)
	b.SetHook(func(e outbox.Event) error {
		if e.Type == "Bad" {
			return broker.Permanentf("consumer contract violated by %s", e.Type)
		}
		return nil
	})
	res = b.Publish(ctx, []outbox.Event{paid, poison})
	fmt.Println("paid:", res[0], "| poison permanent:", broker.IsPermanent(res[1]))

	for _, e := range b.Events("orders") {
		fmt.Printf("delivered %s %s %s\n", e.Key, e.Type, e.Payload)
	}
	// Output:
	// down: true permanent: false
	// paid: <nil> | poison permanent: true
	// delivered order-42 OrderPaid {"id":42}
}
