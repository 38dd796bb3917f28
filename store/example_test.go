package store_test

import (
	"context"
	"errors"
	"fmt"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/sqlitestore"
)

// An event is enqueued in the transaction of the business change it
// describes: the two commit together, or neither happens. (SQLite in
// memory here; pgstore and mysqlstore are used the same way.)
func Example() {
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, "sqlite::memory:", sqlitestore.Config{})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		panic(err)
	}
	db := st.DB()
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id INTEGER PRIMARY KEY, paid INTEGER)"); err != nil {
		panic(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, paid) VALUES (42, 1)"); err != nil {
		panic(err)
	}
	paid := outbox.Message{Topic: "orders", Key: "order-42", Type: "OrderPaid", Payload: []byte(`{"id":42}`)}
	if err := st.EnqueueTx(ctx, tx, paid); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	stats, err := st.Stats(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("waiting for the relay:", stats.New)
	// Output: waiting for the relay: 1
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
