package pgstore_test

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/pgstore"
)

// Enqueue inside the caller's pgx transaction: the event commits or rolls
// back with the business change. (Needs a server, so it is compiled, not run.)
func ExampleStore_EnqueuePgxTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	st, err := pgstore.New(pool, pgstore.Config{})
	if err != nil {
		panic(err)
	}
	if err := st.Migrate(ctx); err != nil {
		panic(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE orders SET status = 'PAID' WHERE id = $1", 42); err != nil {
			return err
		}
		return st.EnqueuePgxTx(ctx, tx, outbox.Message{Topic: "orders.paid", Key: "order-42", Type: "OrderPaid", Payload: []byte(`{"order_id":42}`)})
	})
	if err != nil {
		panic(err)
	}
}

// The same through database/sql with pgx's stdlib driver (import
// _ "github.com/jackc/pgx/v5/stdlib"): what sqlx, GORM, ent and bun use.
func ExampleStore_EnqueueTx() {
	ctx := context.Background()
	db, _ := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test")
	defer db.Close()
	st, _ := pgstore.Open(ctx, "postgres://postgres@127.0.0.1:5432/test", pgstore.Config{})
	defer st.Close()
	tx, _ := db.BeginTx(ctx, nil)
	defer tx.Rollback()
	_ = st.EnqueueTx(ctx, tx, outbox.Message{Topic: "orders.paid", Key: "order-42", Type: "OrderPaid", Payload: []byte(`{"order_id":42}`)})
	_ = tx.Commit()
}

// The outbox row can ride the business statement's round trip: queue both
// on one pgx batch. Sent on a pool, a batch is one implicit transaction, so
// the order update and the event commit together or not at all. (Needs a
// server, so it is compiled, not run.)
func ExampleStore_EnqueueInBatch() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	st, err := pgstore.New(pool, pgstore.Config{})
	if err != nil {
		panic(err)
	}
	b := &pgx.Batch{}
	b.Queue("UPDATE orders SET status = 'PAID' WHERE id = $1", 42)
	if err := st.EnqueueInBatch(b, outbox.Message{Topic: "orders.paid", Key: "order-42", Type: "OrderPaid", Payload: []byte(`{"order_id":42}`)}); err != nil {
		panic(err) // a validation error: nothing was queued
	}
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		panic(err) // neither the update nor the event was committed
	}
}
