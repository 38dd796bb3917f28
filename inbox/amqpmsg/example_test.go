package amqpmsg_test

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox/inbox/amqpmsg"
)

// In a consumer loop, each delivery becomes an inbox.Message for
// inbox.Handle:
//
//	for d := range deliveries {
//		msg, err := amqpmsg.FromDelivery(d)
//		if err != nil { _ = d.Nack(false, false); continue } // malformed: dead-letter
//		if _, err := in.Handle(ctx, "points", msg, handler); err != nil { _ = d.Nack(false, true); continue }
//		_ = d.Ack(false) // processed or duplicate
//	}
func ExampleFromDelivery() {
	d := amqp.Delivery{
		MessageId:   "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a",
		ContentType: "application/json",
		RoutingKey:  "orders",
		Body:        []byte(`{"id":42}`),
		Headers: amqp.Table{
			"cloudEvents:id":            "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a",
			"cloudEvents:type":          "OrderPaid",
			"cloudEvents:partitionkey":  "order-42",
			"cloudEvents:schemaversion": int64(2), // native AMQP long or a string
		},
	}
	msg, err := amqpmsg.FromDelivery(d)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(msg.EventID, msg.Type, msg.Key, msg.SchemaVersion, msg.Topic)
	// Output:
	// 0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a OrderPaid order-42 2 orders
}
