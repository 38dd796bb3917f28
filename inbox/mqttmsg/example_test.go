package mqttmsg_test

import (
	"fmt"

	"github.com/eclipse/paho.golang/paho"

	"github.com/outbox-go/outbox/inbox/mqttmsg"
)

// In a paho OnPublishReceived handler, each received PUBLISH becomes an
// inbox.Message for inbox.Handle:
//
//	OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
//		msg, err := mqttmsg.FromPublish(pr.Packet)
//		if err != nil { return true, err } // malformed: set it aside, never retry
//		_, err = in.Handle(ctx, "points", msg, handler)
//		return true, err
//	}},
func ExampleFromPublish() {
	p := &paho.Publish{
		Topic:   "orders",
		Payload: []byte(`{"id":42}`),
		Properties: &paho.PublishProperties{
			ContentType: "application/json",
			User: paho.UserProperties{
				{Key: "id", Value: "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a"},
				{Key: "type", Value: "Order Paid"},
				{Key: "partitionkey", Value: "order-42"},
				{Key: "schemaversion", Value: "2"},
				{Key: "tenant", Value: "acme"},
			},
		},
	}
	msg, err := mqttmsg.FromPublish(p)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s %q %s v%d %s tenant=%s\n", msg.EventID, msg.Type, msg.Key, msg.SchemaVersion, msg.ContentType, msg.Headers["tenant"])
	// Output:
	// 0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a "Order Paid" order-42 v2 application/json tenant=acme
}
