package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/mysqlstore"
)

// The event is written with the business change, in the caller's own
// transaction: it exists if and only if the order update commits.
func ExampleStore_EnqueueTx() {
	ctx := context.Background()
	dsn, err := mysqlstore.DSN("mysql://shop:secret@127.0.0.1:3306/shop")
	if err != nil {
		log.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn) // the driver is github.com/go-sql-driver/mysql
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	st, err := mysqlstore.New(db, mysqlstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil { // usually `outbox migrate --db URL`
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, "UPDATE orders SET status = 'paid' WHERE id = ?", 42); err != nil {
		log.Fatal(err)
	}
	err = st.EnqueueTx(ctx, tx, outbox.Message{
		Topic:   "orders",
		Key:     "order-42", // events of one order are delivered in order
		Type:    "OrderPaid",
		Payload: []byte(`{"id":42}`),
	})
	if err != nil {
		log.Fatal(err) // a validation error leaves tx usable; this example gives up
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}

// DSN turns the project's database URL into a driver DSN for sql.Open.
func ExampleDSN() {
	dsn, err := mysqlstore.DSN("mysql://app:secret@db.internal:3306/shop?tls=true")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(dsn)
	// Output: app:secret@tcp(db.internal:3306)/shop?interpolateParams=true&parseTime=true&timeout=10s&tls=true&maxAllowedPacket=0&time_zone=%27%2B00%3A00%27
}
