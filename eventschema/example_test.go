package eventschema_test

import (
	"errors"
	"fmt"
	"log"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/eventschema"
)

// Two versions of one event: v2 moved the amount into an object with a
// currency. Each message is checked against the schema of its own
// SchemaVersion.
func Example() {
	reg := eventschema.New()
	reg.MustRegister("OrderPaid", 1, []byte(`{
		"type": "object",
		"required": ["order_id", "amount_cents"],
		"properties": {
			"order_id": {"type": "string"},
			"amount_cents": {"type": "integer"}
		}
	}`))
	reg.MustRegister("OrderPaid", 2, []byte(`{
		"type": "object",
		"required": ["order_id", "amount"],
		"properties": {
			"order_id": {"type": "string"},
			"amount": {
				"type": "object",
				"required": ["cents", "currency"],
				"properties": {
					"cents": {"type": "integer"},
					"currency": {"type": "string"}
				}
			}
		}
	}`))
	// A store runs it on every message at enqueue:
	//	sqlitestore.Config{Options: store.Options{Check: reg.Check}}

	ok := outbox.Message{Topic: "orders", Type: "OrderPaid", SchemaVersion: 2,
		Payload: []byte(`{"order_id":"o-42","amount":{"cents":1999,"currency":"EUR"}}`)}
	fmt.Println("v2 message:", reg.Check(ok))

	bad := outbox.Message{Topic: "orders", Type: "OrderPaid", SchemaVersion: 2,
		Payload: []byte(`{"order_id":"o-42","amount":{"cents":"19.99","currency":"EUR"}}`)}
	err := reg.Check(bad)
	fmt.Println(err)
	fmt.Println(errors.Is(err, outbox.ErrSchemaViolation), errors.Is(err, outbox.ErrInvalidMessage))

	var ve *outbox.ValidationError
	if !errors.As(err, &ve) {
		log.Fatal("not a ValidationError")
	}
	fmt.Println("field:", ve.Field)
	// Output:
	// v2 message: <nil>
	// outbox: message 0: Payload/amount/cents: payload does not match its schema (OrderPaid v2): got string, want integer; fix the payload or, if the event's shape changed on purpose, bump SchemaVersion and register the new schema for that version
	// true true
	// field: Payload/amount/cents
}
