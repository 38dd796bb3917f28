// Command orders runs the seeds' story (package orders): with no flags on
// SQLite and an embedded NATS JetStream, or on your own database and NATS:
//
//	go run ./examples/orders/cmd/orders
//	go run ./examples/orders/cmd/orders --db postgres://postgres@127.0.0.1:5432/test --broker nats://127.0.0.1:4222
//
// It is `outbox demo` under another name: the story, its faults and the
// summary computed from the tables live there.
package main

import (
	"context"
	"os"

	"github.com/outbox-go/outbox/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), append([]string{"demo"}, os.Args[1:]...), os.Stdout, os.Stderr))
}
