package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
)

// isAMQP reports whether a --broker URL is RabbitMQ's.
func isAMQP(raw string) bool {
	scheme, _, _ := strings.Cut(raw, ":")
	scheme = strings.ToLower(scheme)
	return scheme == "amqp" || scheme == "amqps"
}

// defaultPort is the usual port of a --broker scheme, for examples in
// messages.
func defaultPort(scheme string) string {
	switch strings.ToLower(scheme) {
	case "amqp":
		return "5672"
	case "amqps":
		return "5671"
	case "mqtt":
		return "1883"
	case "mqtts":
		return "8883"
	}
	return "4222"
}

// setupAMQP is `outbox broker setup` for RabbitMQ: declare the queue and
// bind it for the topics.
func setupAMQP(ctx context.Context, e env, brokerURL, queue, topics string, natsFlags bool) error {
	if natsFlags {
		return fmt.Errorf("%w: --stream and --subjects are for NATS; for RabbitMQ say --queue NAME [--topics 'orders,invoices']", wire.ErrUsage)
	}
	if queue == "" {
		return fmt.Errorf("%w: --queue is required: the queue to declare, e.g. --queue orders", wire.ErrUsage)
	}
	var list []string
	for _, t := range strings.Split(topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			list = append(list, t)
		}
	}
	bctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	exchange, list, err := wire.SetupAMQP(bctx, brokerURL, queue, list)
	if err != nil {
		return err
	}
	printSetup(e.stdout, wire.Mask(brokerURL), exchange, queue, list)
	return nil
}

func printSetup(w io.Writer, where, exchange, queue string, topics []string) {
	if exchange == "" {
		fmt.Fprintf(w, "outbox broker: queue %s on %s is declared; the default exchange routes topic %s to it\n", queue, where, queue)
		return
	}
	fmt.Fprintf(w, "outbox broker: queue %s on %s is declared and bound to exchange %s for %s\n", queue, where, exchange, strings.Join(topics, ", "))
}
