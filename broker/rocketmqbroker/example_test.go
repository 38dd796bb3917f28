package rocketmqbroker_test

import (
	"context"
	"fmt"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/rocketmqbroker"
)

// printer is a Sender that prints what it would send; in production it is
// a started rocketmq.Producer (or use Dial).
type printer struct{}

func (printer) SendSync(_ context.Context, msgs ...*primitive.Message) (*primitive.SendResult, error) {
	m := msgs[0]
	fmt.Println(m.Topic, m.GetShardingKey(), m.GetProperty("CE_type"), string(m.Body))
	return &primitive.SendResult{Status: primitive.SendOK, MessageQueue: &primitive.MessageQueue{Topic: m.Topic, BrokerName: "broker-a", QueueId: 3}, QueueOffset: 41}, nil
}

// New wraps a producer; each confirmed event comes back with its queue and
// queue offset.
func ExampleNew() {
	b, err := rocketmqbroker.New(printer{}, rocketmqbroker.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close(context.Background())
	e := outbox.Event{ID: 1, Message: outbox.Message{Topic: "orders", Key: "order-42", Type: "OrderPaid", Payload: []byte(`{"id":42}`)}.Normalized()}
	for _, r := range b.PublishResults(context.Background(), []outbox.Event{e}) {
		fmt.Println(r.Err, r.Stream, r.Partition, r.Offset)
	}
	// Output:
	// orders order-42 OrderPaid {"id":42}
	// <nil> broker-a 3 41
}
