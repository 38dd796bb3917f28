package pgstore_test

import (
	"context"
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
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

// A relay in ownership mode (what package relay does by default when the store has
// store.Owned): a heartbeat gives it its shards, it claims only from
// those, and it releases the shards it is asked to revoke once their
// events are settled. (Needs a server, so it is compiled, not run.)
func ExampleStore_ClaimOwned() {
	ctx := context.Background()
	st, err := pgstore.Open(ctx, "postgres://postgres@127.0.0.1:5432/test", pgstore.Config{})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	var release []int
	for epoch := int64(1); epoch <= 3; epoch++ {
		own, err := st.Balance(ctx, store.BalanceRequest{Owner: "relay-1", LeaseFor: 30 * time.Second, Release: release, HoldDeadKeys: true})
		if err != nil {
			panic(err)
		}
		release = nil
		var shards []store.ShardLease
		for _, l := range own.Held {
			if l.Revoke {
				release = append(release, l.Shard) // nothing of it is in flight here
			} else {
				shards = append(shards, l)
			}
		}
		c, err := st.ClaimOwned(ctx, store.OwnedClaimRequest{
			ClaimRequest: store.ClaimRequest{Lease: store.Lease{Owner: "relay-1", Epoch: epoch}, Limit: 1000, LeaseFor: 30 * time.Second, HoldDeadKeys: true},
			Shards:       shards,
		})
		if err != nil {
			panic(err)
		}
		// … publish c.Events in per-key order, then:
		if len(c.Events) > 0 {
			if err := st.AckClaim(ctx, c.Lease, len(c.Events)); err != nil {
				panic(err)
			}
		}
	}
	if _, err := st.Balance(ctx, store.BalanceRequest{Owner: "relay-1", Leave: true}); err != nil {
		panic(err)
	}
}
