package kafkamsg_test

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox/inbox/kafkamsg"
)

// In a consumer loop, each fetched record becomes an inbox.Message for
// inbox.Handle:
//
//	fetches.EachRecord(func(r *kgo.Record) {
//		msg, err := kafkamsg.FromRecord(r)
//		if err != nil { /* malformed: to the dead-letter topic */ return }
//		_, err = in.Handle(ctx, "points", msg, handler)
//		...
//	})
func ExampleFromRecord() {
	r := &kgo.Record{
		Topic: "orders",
		Key:   []byte("order-42"),
		Value: []byte(`{"id":42}`),
		Headers: []kgo.RecordHeader{
			{Key: "ce_id", Value: []byte("0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a")},
			{Key: "ce_source", Value: []byte("billing")},
			{Key: "ce_specversion", Value: []byte("1.0")},
			{Key: "ce_type", Value: []byte("OrderPaid")},
			{Key: "ce_schemaversion", Value: []byte("2")},
			{Key: "content-type", Value: []byte("application/json")},
			{Key: "tenant", Value: []byte("acme")},
		},
	}
	msg, err := kafkamsg.FromRecord(r)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(msg.EventID, msg.Type, msg.Key, msg.SchemaVersion, msg.ContentType, msg.Headers["tenant"])

	r.Headers[0].Value = []byte("not-a-uuid")
	_, err = kafkamsg.FromRecord(r)
	fmt.Println(err)
	// Output:
	// 0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a OrderPaid order-42 2 application/json acme
	// inbox: malformed message header ce_id="not-a-uuid": event id is not a UUID (want xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx); the producer must send the outbox event id unchanged; redelivery will not fix this, so dead-letter the message and correct the producer
}
