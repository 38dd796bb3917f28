package amqpbroker

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// EnsureQueue declares the durable queue (a classic queue with the
// server's defaults) if it does not exist, and binds it to exchange with
// each topic as a routing key, so that the relay's events on those topics
// are stored instead of returned as unroutable. With the default exchange
// (exchange "") a queue receives exactly the routing key equal to its name
// and cannot be bound: topics must then be empty or just the queue's name.
// It is idempotent; a queue that exists with other arguments is refused by
// RabbitMQ (PRECONDITION_FAILED), which the error says. The Broker itself
// declares nothing: this is the operator's step (`outbox broker setup`).
func EnsureQueue(ctx context.Context, conn *amqp.Connection, exchange, queue string, topics []string) error {
	if conn == nil {
		return errors.New("amqpbroker: EnsureQueue needs a connection")
	}
	if queue == "" {
		return errors.New("amqpbroker: EnsureQueue needs a queue name")
	}
	if exchange == "" {
		for _, t := range topics {
			if t != queue {
				return fmt.Errorf("amqpbroker: queue %q: on the default exchange a queue receives only the topic equal to its name, not %q; name the queue %q, or publish through an exchange (?exchange=NAME in the broker URL)", queue, t, t)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqpbroker: open a channel: %w", err)
	}
	defer ch.Close() //nolint:errcheck // a failed declare closed it already
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("amqpbroker: declare queue %q: %w", queue, err)
	}
	if exchange == "" {
		return nil
	}
	for _, t := range topics {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := ch.QueueBind(queue, t, exchange, false, nil); err != nil {
			return fmt.Errorf("amqpbroker: bind queue %q to exchange %q for topic %q: %w", queue, exchange, t, err)
		}
	}
	return nil
}

// EnsureQueue is the package's EnsureQueue on the Broker's connection and
// exchange.
func (b *Broker) EnsureQueue(ctx context.Context, queue string, topics []string) error {
	s, err := b.current()
	if err != nil {
		return err
	}
	return EnsureQueue(ctx, s.conn, b.cfg.Exchange, queue, topics)
}

// Exchange returns the exchange the Broker publishes to ("" for the
// default exchange).
func (b *Broker) Exchange() string { return b.cfg.Exchange }
