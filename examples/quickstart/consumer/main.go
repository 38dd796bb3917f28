// Command consumer adds loyalty points for each OrderPaid event it reads
// from NATS JetStream, exactly once: the inbox records the event id in the
// same transaction as the points, so a redelivered event is recognised and
// only acknowledged.
//
//	go run ./examples/quickstart/consumer --db postgres://postgres@127.0.0.1:5432/test --broker nats://127.0.0.1:4222
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os/signal"
	"syscall"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/inbox/natsmsg"
)

func main() {
	dbURL := flag.String("db", "postgres://postgres@127.0.0.1:5432/test", "PostgreSQL URL of the consumer's own database")
	natsURL := flag.String("broker", "nats://127.0.0.1:4222", "NATS URL")
	count := flag.Int("count", 0, "exit after this many events (0: run until interrupted)")
	flag.Parse()
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

	nc, err := nats.Connect(*natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	// The stream stores what the relay publishes; `outbox broker setup
	// --broker nats://… --stream ORDERS --subjects 'orders.>'` does the same.
	stream, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	if err != nil {
		log.Fatal(err)
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "points", FilterSubject: "orders.paid", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		log.Fatal(err)
	}

	done := make(chan struct{})
	seen := 0
	cc, err := cons.Consume(func(m jetstream.Msg) {
		msg, err := natsmsg.FromJetStream(m) // event id, type, key and version from the headers
		if err != nil {
			log.Printf("not an outbox event: %v", err)
			_ = m.Term()
			return
		}
		res, err := in.Handle(ctx, "points", msg, func(ctx context.Context, tx *sql.Tx) error {
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
			log.Printf("event %s: %v (not acknowledged: NATS redelivers it)", msg.EventID, err)
			_ = m.Nak()
			return
		}
		_ = m.Ack() // Processed, or Duplicate: done before, only acknowledge
		fmt.Printf("%s %s %s: %s\n", msg.Type, msg.Key, msg.EventID, res)
		if seen++; *count > 0 && seen == *count {
			close(done)
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Stop()
	log.Println("consumer: waiting for OrderPaid events on", *natsURL)
	select {
	case <-ctx.Done():
	case <-done:
	}
}
