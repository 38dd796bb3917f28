// Command consumer adds loyalty points for each OrderPaid event it reads,
// exactly once: the inbox records the event id in the same transaction as
// the points, so a redelivered event is recognised and only acknowledged.
// It reads NATS JetStream (the stream ORDERS), RabbitMQ (the queue points,
// which `outbox broker setup` binds) or Redis Streams (the stream
// orders.paid, as the consumer group points). Its own database (--db) is
// PostgreSQL, whichever database the producer writes to.
//
//	go run ./examples/quickstart/consumer --db postgres://postgres@127.0.0.1:5432/test --broker nats://127.0.0.1:4222
//	go run ./examples/quickstart/consumer --broker 'amqp://guest:guest@127.0.0.1:5672/'
//	go run ./examples/quickstart/consumer --broker redis://127.0.0.1:6379/0
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/outbox-go/outbox/inbox"
)

// consumer is the points service: its database and its inbox.
type consumer struct {
	in    *inbox.Inbox
	count int           // exit after this many events; 0: never
	seen  int           // events handled so far
	done  chan struct{} // closed after count events
}

func main() {
	dbURL := flag.String("db", "postgres://postgres@127.0.0.1:5432/test", "PostgreSQL URL of the consumer's own database")
	brokerURL := flag.String("broker", env("OUTBOX_BROKER", "nats://127.0.0.1:4222"), "nats://…, amqp://… or redis://… (default: $OUTBOX_BROKER when set)")
	count := flag.Int("count", 0, "exit after this many events (0: run until interrupted)")
	flag.Parse()
	if scheme, _, _ := strings.Cut(*dbURL, "://"); scheme != "postgres" && scheme != "postgresql" {
		log.Fatalf("--db %s:…: the consumer keeps its points in a PostgreSQL database of its own (postgres://…), whichever database the producer writes to", scheme)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	db, err := sql.Open("pgx", *dbURL)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS points (customer text PRIMARY KEY, balance int NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(db, inbox.Config{}) // the dialect is detected from the driver
	if err != nil {
		log.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil { // creates the inbox table once; idempotent
		log.Fatal(err)
	}

	c := &consumer{in: in, count: *count, done: make(chan struct{})}
	switch scheme, _, _ := strings.Cut(*brokerURL, "://"); scheme {
	case "nats":
		err = c.fromNATS(ctx, *brokerURL)
	case "amqp", "amqps":
		err = c.fromRabbitMQ(ctx, *brokerURL)
	case "redis", "rediss":
		err = c.fromRedis(ctx, *brokerURL)
	default:
		err = fmt.Errorf("--broker %s: this example reads nats://, amqp:// or redis://", scheme)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// handle applies one event once, in its own transaction with the inbox
// record. A nil error means done (Processed, or Duplicate: done before):
// acknowledge it. An error means nothing was recorded: let the broker
// redeliver it.
func (c *consumer) handle(ctx context.Context, msg inbox.Message) error {
	res, err := c.in.Handle(ctx, "points", msg, func(ctx context.Context, tx *sql.Tx) error {
		var paid struct {
			Customer string `json:"customer"`
			Amount   int    `json:"amount"`
		}
		if err := json.Unmarshal(msg.Payload, &paid); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO points (customer, balance) VALUES ($1, $2)
			ON CONFLICT (customer) DO UPDATE SET balance = points.balance + EXCLUDED.balance`, paid.Customer, paid.Amount/10)
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s: %s\n", msg.Type, msg.Key, msg.EventID, res)
	if c.seen++; c.count > 0 && c.seen == c.count {
		close(c.done)
	}
	return nil
}

// waiting says the consumer is ready and blocks until ctx ends or count
// events were handled.
func (c *consumer) waiting(ctx context.Context, where string) {
	log.Println("consumer: waiting for OrderPaid events on", where)
	select {
	case <-ctx.Done():
	case <-c.done:
	}
}

// env is the environment variable name, or def when it is unset: the
// programs follow the Quick start's `export OUTBOX_DB=… OUTBOX_BROKER=…`.
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
