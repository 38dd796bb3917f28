package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/outbox-go/outbox/broker/amqpbroker"
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
	br, err := wire.OpenBroker(bctx, brokerURL)
	if err != nil {
		return err
	}
	defer func() { _ = br.Close(context.Background()) }()
	ab, ok := br.(*amqpbroker.Broker)
	if !ok {
		return fmt.Errorf("%w: %s is not a RabbitMQ broker", wire.ErrUsage, wire.Mask(brokerURL))
	}
	if ab.Exchange() == "" {
		if len(list) == 0 {
			list = []string{queue}
		}
		for _, t := range list {
			if t != queue {
				return fmt.Errorf("%w: --topics %s: on the default exchange (no exchange= in the URL) queue %s receives only the topic %s; name the queue after the topic, or publish through an exchange", wire.ErrUsage, t, queue, queue)
			}
		}
	} else if len(list) == 0 {
		return fmt.Errorf("%w: --topics is required with exchange %s: the routing keys to bind queue %s to, e.g. --topics 'orders,invoices'", wire.ErrUsage, ab.Exchange(), queue)
	}
	if err := ab.EnsureQueue(bctx, queue, list); err != nil {
		return wire.ScrubError(err, brokerURL)
	}
	printSetup(e.stdout, wire.Mask(brokerURL), ab.Exchange(), queue, list)
	return nil
}

func printSetup(w io.Writer, where, exchange, queue string, topics []string) {
	if exchange == "" {
		fmt.Fprintf(w, "outbox broker: queue %s on %s is declared; the default exchange routes topic %s to it\n", queue, where, queue)
		return
	}
	fmt.Fprintf(w, "outbox broker: queue %s on %s is declared and bound to exchange %s for %s\n", queue, where, exchange, strings.Join(topics, ", "))
}
