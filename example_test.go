package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jmoiron/sqlx"
	_ "modernc.org/sqlite"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/sqlitestore"
)

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

// Every message is validated before anything is written; the error names
// the field and the fix, and the caller's transaction stays usable.
func ExampleValidate() {
	err := outbox.Validate(outbox.Limits{MaxPayload: 8}, outbox.Message{Topic: "orders", Type: "OrderPaid", Payload: []byte("too large!")})
	fmt.Println(errors.Is(err, outbox.ErrPayloadTooLarge))
	fmt.Println(err)
	err = outbox.Validate(outbox.Limits{}, outbox.Message{Topic: "orders", Type: "OrderPaid", Headers: map[string]string{"Nats-Msg-Id": "x"}})
	fmt.Println(errors.Is(err, outbox.ErrReservedHeader))
	fmt.Println(err)
	// Ordinary application headers pass.
	err = outbox.Validate(outbox.Limits{}, outbox.Message{Topic: "orders", Type: "OrderPaid", Headers: map[string]string{"X-Request-Id": "r-1"}})
	fmt.Println(err)
	// Output:
	// true
	// outbox: message 0: Payload: payload too large; it is 10 bytes, the limit is 8; store large data elsewhere and send a reference, or raise the store's MaxPayload
	// true
	// outbox: message 0: Headers["Nats-Msg-Id"]: reserved header name; reserved by NATS: JetStream acts on Nats-* headers (Nats-Msg-Id deduplication, Nats-Expected-*, Nats-Rollup, Nats-TTL, …); choose another name
	// <nil>
}
