package sqlitestore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/sqlitestore"
)

// The embedded default: one SQLite file holds the application's tables and
// the outbox, and the event commits with the order or not at all.
func Example() {
	dir, err := os.MkdirTemp("", "outbox-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	st, err := sqlitestore.Open(ctx, "sqlite:"+filepath.Join(dir, "app.db"), sqlitestore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	db := st.DB() // the application uses the same database
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id INTEGER PRIMARY KEY, total_cents INTEGER NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, total_cents) VALUES (?, ?)", 42, 1999); err != nil {
		log.Fatal(err)
	}
	err = st.EnqueueTx(ctx, tx, outbox.Message{
		Topic:   "orders",
		Key:     "order-42",
		Type:    "OrderPaid",
		Payload: []byte(`{"id":42,"total_cents":1999}`),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	stats, err := st.Stats(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("events waiting for the relay:", stats.New)
	// Output: events waiting for the relay: 1
}

// DSN turns the CLI's URL into the driver's data source name, for opening
// the database with database/sql yourself and passing it to New.
func ExampleDSN() {
	dsn, err := sqlitestore.DSN("sqlite:data/app.db")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(dsn)
	// Output: data/app.db?_pragma=busy_timeout%285000%29&_pragma=foreign_keys%281%29&_pragma=journal_mode%28WAL%29&_txlock=immediate
}
