package amqpbroker

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox/internal/redact"
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

// DeclareExchange makes sure the durable exchange name exists: one that
// exists is left as it is, whatever its kind; a missing one is declared
// with kind (default "topic", so that routing keys may use RabbitMQ's
// wildcards). Idempotent.
func DeclareExchange(ctx context.Context, conn *amqp.Connection, name, kind string) error {
	if conn == nil {
		return errors.New("amqpbroker: DeclareExchange needs a connection")
	}
	if name == "" {
		return errors.New("amqpbroker: DeclareExchange needs an exchange name (the default exchange always exists)")
	}
	if kind == "" {
		kind = amqp.ExchangeTopic
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqpbroker: open a channel: %w", err)
	}
	// A passive declare that finds nothing closes its channel (404), so the
	// real declare gets a channel of its own.
	if err := ch.ExchangeDeclarePassive(name, kind, true, false, false, false, nil); err == nil {
		return ch.Close()
	}
	ch, err = conn.Channel()
	if err != nil {
		return fmt.Errorf("amqpbroker: open a channel: %w", err)
	}
	defer ch.Close() //nolint:errcheck // a failed declare closed it already
	if err := ch.ExchangeDeclare(name, kind, true, false, false, false, nil); err != nil {
		return fmt.Errorf("amqpbroker: declare exchange %q (%s): %w", name, kind, err)
	}
	return nil
}

// Setup is `outbox broker setup` for RabbitMQ: on a connection of its own
// to rawURL, it declares the URL's exchange when it names one and it does
// not exist (kind "topic"), declares the durable queue and binds it for
// each topic (see EnsureQueue), then closes the connection. It returns the
// exchange ("" for the default exchange). Unlike Dial it needs no exchange
// to exist beforehand: creating it is its job.
func Setup(ctx context.Context, rawURL, queue string, topics []string) (exchange string, err error) {
	if exchange, err = exchangeFromURL(rawURL); err != nil {
		return "", err
	}
	cfg := Config{}.WithDefaults()
	acfg := cfg.AMQP
	acfg.Dial = amqp.DefaultDial(cfg.Timeout)
	acfg.Properties = amqp.Table{"connection_name": "outbox broker setup"}
	conn, err := amqp.DialConfig(rawURL, acfg)
	if err != nil {
		return "", redact.Error(fmt.Errorf("amqpbroker: connect to %s: %w", redact.URL(rawURL), err), rawURL)
	}
	defer conn.Close() //nolint:errcheck // nothing is left to lose
	if exchange != "" {
		if err := DeclareExchange(ctx, conn, exchange, ""); err != nil {
			return "", err
		}
	}
	return exchange, EnsureQueue(ctx, conn, exchange, queue, topics)
}

// Exchange returns the exchange the Broker publishes to ("" for the
// default exchange).
func (b *Broker) Exchange() string { return b.cfg.Exchange }
