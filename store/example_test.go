package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
)

// An event is enqueued in the transaction of the business change it
// describes: the two commit together, or neither happens. st is any of
// pgstore, mysqlstore or sqlitestore, writing to the application's own
// database db; their examples run this against a real database (this
// package's tests open none, so that a program importing one store does not
// download the others' drivers).
func Example() {
	payOrder := func(ctx context.Context, db *sql.DB, st store.Store, orderID int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		if _, err := tx.ExecContext(ctx, "UPDATE orders SET paid = 1 WHERE id = ?", orderID); err != nil {
			return err
		}
		err = st.EnqueueTx(ctx, tx, outbox.Message{
			Topic:   "orders.paid",
			Key:     fmt.Sprintf("order-%d", orderID), // a key's events are delivered in order
			Type:    "OrderPaid",
			Payload: []byte(fmt.Sprintf(`{"order_id":%d}`, orderID)),
		})
		if err != nil {
			return err
		}
		return tx.Commit() // commit: the event exists; rollback: it never did
	}
	_ = payOrder // with st from pgstore.New(pool, …), mysqlstore.Open(ctx, url, …) or sqlitestore.Open(ctx, url, …)
}

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
