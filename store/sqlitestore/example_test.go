package sqlitestore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/jmoiron/sqlx"

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

// Enqueue inside a transaction that sqlx hands out (GORM, ent and bun work
// the same way: each exposes a *sql.Tx, or something with ExecContext).
func Example_sqlx() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	url := "sqlite:" + filepath.Join(dir, "app.db")

	st, err := sqlitestore.Open(ctx, url, sqlitestore.Config{})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		panic(err)
	}
	dsn, _ := sqlitestore.DSN(url)
	db := sqlx.MustOpen("sqlite", dsn)
	defer db.Close()
	db.MustExec("CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT)")

	tx := db.MustBeginTx(ctx, nil)
	tx.MustExec("INSERT INTO orders (id, status) VALUES (42, 'PAID')")
	err = st.EnqueueTx(ctx, tx, outbox.Message{Topic: "orders.paid", Key: "order-42", Type: "OrderPaid", Payload: []byte(`{"order_id":42}`)})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	stats, _ := st.Stats(ctx)
	fmt.Println("pending events:", stats.Pending())
	// Output: pending events: 1
}
