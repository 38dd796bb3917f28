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

// A row written by plain SQL skips outbox.Validate; the adapter checks it
// again before sending, and the relay buries it with the reason.
func ExampleCheckEvent() {
	row := outbox.Event{ID: 7, Message: outbox.Message{
		EventID: "0193a8c2-7f4e-7b2a-9c1d-2e3f4a5b6c7d", Topic: "orders", Key: "order-42", Type: "",
	}}
	fmt.Println(broker.CheckEvent(broker.NATS, &row))
	row.Type = "OrderPaid"
	row.Headers = map[string]string{"X-Request-Id": "r-1"}
	fmt.Println(broker.CheckEvent(broker.NATS, &row))
	row.Headers = map[string]string{"Status": "100"}
	fmt.Println(errors.Is(broker.CheckEvent(broker.NATS, &row), outbox.ErrReservedHeader))
	// Output:
	// not a valid CloudEvent: type (event_type): outbox: type is empty: CloudEvents requires a non-empty type; set event_type to what happened, e.g. 'OrderPaid' (outbox: invalid message)
	// <nil>
	// true
}

// The header names one transport reserves.
func ExampleReservedHeaders() {
	for _, r := range broker.ReservedHeaders(broker.NATS) {
		name := r.Name
		if r.Prefix {
			name += "*"
		}
		fmt.Println(name)
	}
	// Output:
	// content-type
	// ce-*
	// nats-*
	// status
	// description
}
