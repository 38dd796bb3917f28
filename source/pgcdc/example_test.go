package pgcdc_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/source/pgcdc"
)

// A table-less outbox: the event is written into the WAL by the caller's
// transaction and streamed from a replication slot.
func ExampleEmitter() {
	ctx := context.Background()
	url := os.Getenv("OUTBOX_TEST_POSTGRES")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	table := uniq("example_")
	cfg := pgcdc.Config{Table: table, TableLess: true, Prefix: "outbox_" + table, Logger: quietLogger()}
	defer func() { // an example leaves no slot behind
		_ = pgcdc.DropSlot(ctx, pool, cfg, true)
		_, _ = pool.Exec(ctx, "DROP PUBLICATION IF EXISTS outbox_"+table+"_pub")
		for _, t := range []string{table + "_cdc", table + "_dead", table + "_dead_archive", table + "_dead_claims", table + "_dead_migrations"} {
			_, _ = pool.Exec(ctx, "DROP TABLE IF EXISTS "+t)
		}
	}()

	src, err := pgcdc.New(pool, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := src.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer src.Close()
	b, _ := membroker.New(membroker.Config{})
	loop, _ := relay.NewSource(src, b, relay.Config{Logger: quietLogger()})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- loop.Run(runCtx) }()

	// the producer: the event commits with the business change
	tx, _ := pool.Begin(ctx)
	_ = pgcdc.Emitter{Prefix: cfg.Prefix}.Enqueue(ctx, tx, outbox.Message{Topic: "orders", Key: "order-42", Type: "OrderPaid", Payload: []byte(`{"id":42}`)})
	_ = tx.Commit(ctx)

	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got, err := b.Wait(wctx, "orders", 1)
	stop()
	<-done
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s %s %s\n", got[0].Type, got[0].Key, got[0].Payload)
	// Output: OrderPaid order-42 {"id":42}
}
