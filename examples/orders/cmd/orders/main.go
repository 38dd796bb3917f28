// Command orders runs the seeds' story (package orders): with no flags on
// SQLite and an embedded NATS JetStream, or on your own database and NATS:
//
//	go run ./examples/orders/cmd/orders
//	go run ./examples/orders/cmd/orders --db postgres://postgres@127.0.0.1:5432/test --broker nats://127.0.0.1:4222
//
// It is `outbox demo` under another name: the story, its faults and the
// summary computed from the tables live there. The story runs its relay as
// a child process of this same executable, as `orders relay --db … --broker …`,
// so that it can SIGKILL it mid-batch; that first argument is passed through
// to `outbox relay` instead of to the story.
package main

import (
	"context"
	"os"

	"github.com/outbox-go/outbox/internal/cli"
)

func main() {
	args := os.Args[1:]
	if len(args) == 0 || args[0] != "relay" {
		args = append([]string{"demo"}, args...)
	}
	os.Exit(cli.Main(context.Background(), args, os.Stdout, os.Stderr))
}
