package httpbroker_test

import (
	"context"
	"fmt"
	"log"
	"os"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/httpbroker"
)

// POST events to https://hooks.example/<topic>, signed with the endpoint's
// Standard Webhooks secret. Not run by go test: it needs an endpoint.
func Example() {
	b, err := httpbroker.Dial("https://hooks.example/{topic}", httpbroker.Config{
		Secret: os.Getenv("OUTBOX_WEBHOOK_SECRET"), // whsec_…
		Source: "/order-service",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(context.Background())

	events := []outbox.Event{{ID: 1, Message: outbox.Message{
		EventID: outbox.NewEventID(), Topic: "orders", Key: "order-42",
		Type: "OrderPaid", Payload: []byte(`{"id":42}`),
	}}}
	for _, err := range b.Publish(context.Background(), events) {
		switch {
		case err == nil:
			fmt.Println("accepted")
		case broker.IsPermanent(err):
			fmt.Println("refused for good:", err)
		default:
			fmt.Println("retry later, not before", broker.RetryAfterOf(err), ":", err)
		}
	}
}

// Sign what a receiver checks: the webhook-signature of a message (the
// same value Python's hmac module computes from the spec).
func ExampleSign() {
	key, err := httpbroker.DecodeSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw2KcLzFWcSGQ=")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(httpbroker.Sign(key, "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a", "1700000000", []byte(`{"id":42}`)))
	// Output: v1,FestVI3v9YUMWahklIir4alJCu59BXpZ7G+H0NamhOM=
}
