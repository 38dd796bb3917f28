package natsmsg_test

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/outbox-go/outbox/inbox/natsmsg"
)

// With the jetstream package, each consumed message becomes an
// inbox.Message for inbox.Handle:
//
//	cons.Consume(func(m jetstream.Msg) {
//		msg, err := natsmsg.FromJetStream(m)
//		if err != nil { _ = m.Term(); return } // malformed: never retry
//		if _, err := in.Handle(ctx, "points", msg, handler); err != nil { _ = m.Nak(); return }
//		_ = m.Ack() // processed or duplicate
//	})
func ExampleFromMsg() {
	m := &nats.Msg{
		Subject: "orders",
		Data:    []byte(`{"id":42}`),
		Header: nats.Header{
			"Nats-Msg-Id":      {"0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a"},
			"ce-id":            {"0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a"},
			"ce-type":          {"Order%20Paid"}, // percent-encoded per the NATS binding
			"ce-partitionkey":  {"order-42"},
			"ce-schemaversion": {"2"},
		},
	}
	msg, err := natsmsg.FromMsg(m)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s %q %s v%d\n", msg.EventID, msg.Type, msg.Key, msg.SchemaVersion)
	// Output:
	// 0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a "Order Paid" order-42 v2
}
