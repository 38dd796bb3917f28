package driver_test

import (
	"context"
	"errors"
	"fmt"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/driver"
)

// Wakeups is what a store's Notifier is built on: every subscriber hears a
// broadcast, and a slow one never blocks the sender.
func ExampleWakeups() {
	var w driver.Wakeups
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	relayA, relayB := w.Subscribe(ctx), w.Subscribe(ctx)
	w.Broadcast()
	w.Broadcast() // coalesced: each channel holds one pending wake-up
	<-relayA
	<-relayB
	fmt.Println("both woke;", w.Len(), "subscribers")
	// Output: both woke; 2 subscribers
}

// The headers column must hold a JSON object of strings; anything else is a
// row that breaks the table contract, and the claim that takes it buries it
// DEAD with this reason.
func ExampleDecodeHeaders() {
	h, err := driver.DecodeHeaders([]byte(`{"trace-id":"abc"}`))
	fmt.Println(h, err)
	_, err = driver.DecodeHeaders([]byte(`[1,2]`))
	fmt.Println(errors.Is(err, driver.ErrBadRow))
	fmt.Println(err)
	// Output:
	// map[trace-id:abc] <nil>
	// true
	// the row breaks the table contract: headers column is not a JSON object of strings: it holds an array ([1,2]); write an object such as {"trace-id":"abc"}; fix the row with SQL, then `outbox dead retry ID`
}

// CheckRow is what a claim asks of every row beyond its column types.
func ExampleCheckRow() {
	e := outbox.Event{ID: 7, Message: outbox.Message{Topic: "orders", Key: "order-42", Type: "Order\nPaid"}}
	fmt.Println(driver.CheckRow(&e))
	e.Type = "OrderPaid"
	fmt.Println(driver.CheckRow(&e))
	// Output:
	// the row breaks the table contract: event_type has the control character U+000A at byte 5: remove it (CloudEvents strings exclude U+0000–U+001F and U+007F–U+009F); fix the row with SQL, then `outbox dead retry ID`
	// <nil>
}
