package wire

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/amqpbroker"
)

// amqpParams are the query parameters an amqp:// --broker URL may carry:
// the adapter's own, then amqp091-go's (which it reads from the URL).
var amqpParams = []string{"exchange", "max_message", "source",
	"heartbeat", "connection_timeout", "channel_max", "auth_mechanism", "certfile", "keyfile", "cacertfile", "server_name_indication"}

// openAMQP opens amqp://user:pass@host:5672/vhost[?exchange=name].
func openAMQP(_ context.Context, raw string, u *url.URL) (broker.Broker, error) {
	cfg, err := amqpConfig(raw, u)
	if err != nil {
		return nil, err
	}
	b, err := amqpbroker.Dial(raw, cfg)
	if reason := amqpRefusal(err); reason != "" {
		// RabbitMQ answered and refused: retrying cannot fix the URL.
		return nil, fmt.Errorf("%w: --broker %s: %s", ErrUsage, Mask(raw), reason)
	}
	return b, err
}

// SetupAMQP is `outbox broker setup` for RabbitMQ (amqpbroker.Setup): it
// declares the URL's exchange when missing, the queue, and its bindings
// for topics, and returns the exchange ("" for the default exchange) and
// the topics bound (on the default exchange: the queue's own name).
func SetupAMQP(ctx context.Context, raw, queue string, topics []string) (string, []string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", nil, fmt.Errorf("%w: broker URL %s is not a URL: %v", ErrUsage, Mask(raw), ScrubError(err, raw))
	}
	cfg, err := amqpConfig(raw, u)
	if err != nil {
		return "", nil, err
	}
	if cfg.Exchange == "" {
		if len(topics) == 0 {
			topics = []string{queue}
		}
		for _, t := range topics {
			if t != queue {
				return "", nil, fmt.Errorf("%w: --topics %s: on the default exchange (no exchange= in the URL) queue %s receives only the topic %s; name the queue after the topic, or publish through an exchange (add ?exchange=NAME to the URL: broker setup declares it)", ErrUsage, t, queue, queue)
			}
		}
	} else if len(topics) == 0 {
		return "", nil, fmt.Errorf("%w: --topics is required with exchange %s: the routing keys to bind queue %s to, e.g. --topics 'orders.#'", ErrUsage, cfg.Exchange, queue)
	}
	exchange, err := amqpbroker.Setup(ctx, raw, queue, topics)
	if reason := amqpRefusal(err); reason != "" {
		return "", nil, fmt.Errorf("%w: --broker %s: %s", ErrUsage, Mask(raw), reason)
	}
	return exchange, topics, ScrubError(err, raw)
}

// amqpConfig checks an amqp:// --broker URL and returns the adapter's
// settings it carries.
func amqpConfig(raw string, u *url.URL) (amqpbroker.Config, error) {
	var cfg amqpbroker.Config
	if err := checkUserinfo("broker", raw, goUserinfo); err != nil {
		return cfg, err
	}
	if u.Hostname() == "" {
		return cfg, fmt.Errorf("%w: --broker %s names no host; say which server, e.g. amqp://guest:guest@127.0.0.1:5672/", ErrUsage, Mask(raw))
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return cfg, fmt.Errorf("%w: the query of --broker %s is malformed: %v", ErrUsage, Mask(raw), err)
	}
	for name, vals := range q {
		if !contains(amqpParams, name) {
			return cfg, fmt.Errorf("%w: --broker %s: unknown parameter %q; the amqp URL takes %s", ErrUsage, Mask(raw), name, strings.Join(amqpParams, ", "))
		}
		if len(vals) > 1 {
			return cfg, fmt.Errorf("%w: --broker %s: parameter %q given %d times; give it once", ErrUsage, Mask(raw), name, len(vals))
		}
	}
	cfg = amqpbroker.Config{Exchange: q.Get("exchange"), Source: q.Get("source")}
	if v := q.Get("max_message"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return cfg, fmt.Errorf("%w: --broker %s: max_message=%q is not a positive number of bytes", ErrUsage, Mask(raw), v)
		}
		cfg.MaxMessage = n
	}
	return cfg, nil
}

// amqpRefusal says what to fix when err is RabbitMQ refusing the
// connection at its handshake: the credentials (403 ACCESS_REFUSED: a wrong
// user name or password, or no permission on the vhost) or the vhost
// (530 NOT_ALLOWED: it does not exist); "" for any other error, such as a
// server that cannot be reached, which is worth retrying.
func amqpRefusal(err error) string {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return ""
	}
	switch ae.Code {
	case amqp.AccessRefused:
		return fmt.Sprintf("RabbitMQ refused the credentials (403 ACCESS_REFUSED: %s): check the user name and password in the URL (percent-encoded) and the user's permissions on the vhost (rabbitmqctl list_user_permissions USER)", ae.Reason)
	case amqp.NotAllowed:
		return fmt.Sprintf("RabbitMQ refused the vhost (530 NOT_ALLOWED: %s): check the URL's path, which names the vhost (amqp://host:5672/ is the default vhost \"/\"; rabbitmqctl list_vhosts)", ae.Reason)
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
