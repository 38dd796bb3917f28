package outbox_test

import (
	"errors"
	"fmt"

	outbox "github.com/outbox-go/outbox"
)

// Every message is validated before anything is written; the error names
// the field and the fix, and the caller's transaction stays usable.
func ExampleValidate() {
	err := outbox.Validate(outbox.Limits{MaxPayload: 8}, outbox.Message{Topic: "orders", Type: "OrderPaid", Payload: []byte("too large!")})
	fmt.Println(errors.Is(err, outbox.ErrPayloadTooLarge))
	fmt.Println(err)
	err = outbox.Validate(outbox.Limits{}, outbox.Message{Topic: "orders", Type: "OrderPaid", Headers: map[string]string{"Nats-Msg-Id": "x"}})
	fmt.Println(errors.Is(err, outbox.ErrReservedHeader))
	fmt.Println(err)
	// Ordinary application headers pass.
	err = outbox.Validate(outbox.Limits{}, outbox.Message{Topic: "orders", Type: "OrderPaid", Headers: map[string]string{"X-Request-Id": "r-1"}})
	fmt.Println(err)
	// Output:
	// true
	// outbox: message 0: Payload: payload too large; it is 10 bytes, the limit is 8; store large data elsewhere and send a reference, or raise the store's MaxPayload
	// true
	// outbox: message 0: Headers["Nats-Msg-Id"]: reserved header name; reserved by NATS: JetStream acts on Nats-* headers (Nats-Msg-Id deduplication, Nats-Expected-*, Nats-Rollup, Nats-TTL, …); choose another name
	// <nil>
}
