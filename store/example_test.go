package store_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/outbox-go/outbox/store"
)

// Table and schema names are validated, then quoted; nothing is ever
// concatenated raw into SQL.
func ExampleValidateName() {
	fmt.Println(store.ValidateName("table", "orders_outbox"))
	err := store.ValidateName("table", `a"; DROP TABLE x; --`)
	fmt.Println(errors.Is(err, store.ErrInvalidName))
	// Output:
	// <nil>
	// true
}

// Wakeups is what a store's Notifier is built on: every subscriber hears a
// broadcast, and a slow one never blocks the sender.
func ExampleWakeups() {
	var w store.Wakeups
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
