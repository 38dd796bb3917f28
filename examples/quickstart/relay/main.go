// Command relay runs the relay inside your own process: it delivers the
// outbox table's events to NATS JetStream until interrupted (Ctrl-C or
// SIGTERM), then stops gracefully. `outbox relay --db URL --broker URL`
// does the same from the command line.
//
//	go run ./examples/quickstart/relay --db postgres://postgres@127.0.0.1:5432/test --broker nats://127.0.0.1:4222
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store/pgstore"
)

func main() {
	dbURL := flag.String("db", env("OUTBOX_DB", "postgres://postgres@127.0.0.1:5432/test"), "PostgreSQL URL (default: $OUTBOX_DB when set)")
	natsURL := flag.String("broker", env("OUTBOX_BROKER", "nats://127.0.0.1:4222"), "NATS URL (default: $OUTBOX_BROKER when set)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	st, err := pgstore.Open(ctx, *dbURL, pgstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	br, err := natsbroker.Dial(*natsURL, natsbroker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer br.Close(context.Background())
	r, err := relay.New(st, br, relay.Config{})
	if err != nil {
		log.Fatal(err)
	}
	log.Println("relay: delivering; Ctrl-C to stop")
	if err := r.Run(ctx); err != nil { // returns after a graceful stop when ctx ends
		log.Fatal(err)
	}
	log.Println("relay: stopped")
}

// env is the environment variable name, or def when it is unset: the
// programs follow the Quick start's `export OUTBOX_DB=… OUTBOX_BROKER=…`.
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
