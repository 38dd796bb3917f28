// Command producer marks an order paid and enqueues its OrderPaid event in
// the same pgx transaction: both commit, or neither does.
//
//	go run ./examples/quickstart/producer --db postgres://postgres@127.0.0.1:5432/test --order 7
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/pgstore"
)

func main() {
	dbURL := flag.String("db", env("OUTBOX_DB", "postgres://postgres@127.0.0.1:5432/test"), "PostgreSQL URL (default: $OUTBOX_DB when set)")
	orderID := flag.Int("order", 7, "the order to mark paid")
	flag.Parse()
	ctx := context.Background()

	pool, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	st, err := pgstore.New(pool, pgstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	// Once per database (idempotent); `outbox migrate --db URL` does the same.
	if err := st.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY, status text NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, status) VALUES ($1, 'PAID')
		ON CONFLICT (id) DO UPDATE SET status = 'PAID'`, *orderID); err != nil {
		log.Fatal(err)
	}
	msg := outbox.Message{
		Topic:   "orders.paid",                     // NATS subject, Kafka topic, AMQP routing key, …
		Key:     fmt.Sprintf("order-%d", *orderID), // events of one key are delivered in order
		Type:    "OrderPaid",
		Payload: []byte(fmt.Sprintf(`{"order_id":%d,"customer":"alice","amount":120}`, *orderID)),
	}
	if err := st.EnqueuePgxTx(ctx, tx, msg); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil { // commit: the event exists; rollback: it never did
		log.Fatal(err)
	}
	fmt.Println("order", *orderID, "paid; OrderPaid enqueued")
}

// env is the environment variable name, or def when it is unset: the
// programs follow the Quick start's `export OUTBOX_DB=… OUTBOX_BROKER=…`.
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
