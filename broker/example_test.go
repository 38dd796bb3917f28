package broker_test

import (
	"errors"
	"fmt"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// An adapter marks failures that retrying cannot fix; the relay buries
// those events at once and retries the others with backoff.
func ExamplePermanent() {
	tooBig := broker.Permanentf("message of %d bytes exceeds the broker's limit", 2<<20)
	timeout := errors.New("no ack within 10s")
	fmt.Println(broker.IsPermanent(tooBig), broker.IsPermanent(timeout))
	// Output: true false
}

// The CloudEvents attributes every adapter sends, before its transport's
// prefix (ce- for NATS and HTTP, ce_ for Kafka, cloudEvents: for AMQP).
func ExampleCloudEventAttributes() {
	e := outbox.Event{ID: 1, CreatedAt: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), Message: outbox.Message{
		EventID: "0193a8c2-7f4e-7b2a-9c1d-2e3f4a5b6c7d", Topic: "orders.paid", Key: "order-42", Type: "OrderPaid", SchemaVersion: 2,
	}}
	for _, a := range broker.CloudEventAttributes(e, "billing") {
		fmt.Printf("%s=%s\n", a.Name, a.Value)
	}
	// Output:
	// id=0193a8c2-7f4e-7b2a-9c1d-2e3f4a5b6c7d
	// source=billing
	// specversion=1.0
	// type=OrderPaid
	// time=2026-11-29T10:00:00Z
	// datacontenttype=application/json
	// partitionkey=order-42
	// schemaversion=2
}
