// Command producersql marks an order paid and enqueues its OrderPaid event
// in the same database/sql transaction, on MariaDB/MySQL or SQLite.
//
//	go run ./examples/quickstart/producersql --db 'mysql://root@127.0.0.1:3306/test' --order 7
//	go run ./examples/quickstart/producersql --db sqlite:app.db --order 7
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/mysqlstore"
	"github.com/outbox-go/outbox/store/sqlitestore"
)

// producer is what both stores offer a database/sql program.
type producer interface {
	Migrate(ctx context.Context) error
	EnqueueTx(ctx context.Context, tx store.Execer, msgs ...outbox.Message) error
}

func main() {
	dbURL := flag.String("db", env("OUTBOX_DB", "sqlite:app.db"), "mysql://user:pass@host:3306/db or sqlite:path/to/file.db (default: $OUTBOX_DB when set)")
	orderID := flag.Int("order", 7, "the order to mark paid")
	flag.Parse()
	ctx := context.Background()

	// Open gives the store's *sql.DB, set up for it; with a *sql.DB of
	// your own, use mysqlstore.New(db, …) or sqlitestore.New(db, …).
	var (
		st producer
		db *sql.DB
	)
	if strings.HasPrefix(*dbURL, "mysql:") {
		s, err := mysqlstore.Open(ctx, *dbURL, mysqlstore.Config{})
		if err != nil {
			log.Fatal(err)
		}
		defer s.Close()
		st, db = s, s.DB()
	} else {
		s, err := sqlitestore.Open(ctx, *dbURL, sqlitestore.Config{})
		if err != nil {
			log.Fatal(err)
		}
		defer s.Close()
		st, db = s, s.DB()
	}
	if err := st.Migrate(ctx); err != nil { // once per database; idempotent
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (id INT PRIMARY KEY, status VARCHAR(16) NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `DELETE FROM orders WHERE id = ?`, *orderID); err != nil {
		log.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, status) VALUES (?, 'PAID')`, *orderID); err != nil {
		log.Fatal(err)
	}
	err = st.EnqueueTx(ctx, tx, outbox.Message{
		Topic:   "orders.paid",
		Key:     fmt.Sprintf("order-%d", *orderID),
		Type:    "OrderPaid",
		Payload: []byte(fmt.Sprintf(`{"order_id":%d,"customer":"alice","amount":120}`, *orderID)),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
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
