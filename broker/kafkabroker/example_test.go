package kafkabroker_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/kafkabroker"
)

// Dial connects to the cluster; EnsureTopics creates the topic the relay
// will write to; each confirmed event comes back with its partition and
// offset. (kfake stands in for a Kafka cluster here.)
func ExampleDial() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1))
	defer cluster.Close()
	url := "kafka://" + strings.Join(cluster.ListenAddrs(), ",") + "?client_id=orders-relay"

	b, err := kafkabroker.Dial(url, kafkabroker.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kafkabroker.EnsureTopics(ctx, b.Client(), 1, 1, "orders"); err != nil {
		fmt.Println(err)
		return
	}
	e := outbox.Event{ID: 1, Message: outbox.Message{Topic: "orders", Key: "order-42", Type: "OrderPaid", Payload: []byte(`{"id":42}`)}.Normalized()}
	for _, r := range b.PublishResults(ctx, []outbox.Event{e}) {
		fmt.Println(r.Err, r.Partition, r.Offset)
	}
	fmt.Println(b.Features().Ordering)
	// Output:
	// <nil> 0 0
	// partition
}
