// Command outbox migrates, relays, inspects and repairs transactional
// outbox tables. Run `outbox --help`.
package main

import (
	"context"
	"os"

	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
