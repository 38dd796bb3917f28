package redismsg_test

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox/inbox/redismsg"
)

// In a consumer loop, each entry read with XREADGROUP becomes an
// inbox.Message for inbox.Handle:
//
//	streams, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "points", Consumer: "c1", Streams: []string{"orders", ">"}}).Result()
//	for _, m := range streams[0].Messages {
//		msg, err := redismsg.FromXMessage("orders", m)
//		...
//		_, err = in.Handle(ctx, "points", msg, handler)
//		rdb.XAck(ctx, "orders", "points", m.ID)
//	}
func ExampleFromXMessage() {
	m := redis.XMessage{ID: "1718000000000-0", Values: map[string]any{
		"data":             `{"id":42}`,
		"ce_id":            "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a",
		"ce_source":        "billing",
		"ce_specversion":   "1.0",
		"ce_type":          "OrderPaid",
		"ce_schemaversion": "2",
		"content_type":     "application/json",
		"key":              "order-42",
		"h:tenant":         "acme",
	}}
	msg, err := redismsg.FromXMessage("orders", m)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(msg.EventID, msg.Type, msg.Key, msg.SchemaVersion, msg.ContentType, msg.Headers["tenant"], string(msg.Payload))
	// Output:
	// 0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a OrderPaid order-42 2 application/json acme {"id":42}
}
