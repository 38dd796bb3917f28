package rocketmqbroker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/internal/redact"
)

// Defaults for Config fields left at zero.
const (
	DefaultTimeout = 10 * time.Second
	// DefaultMaxMessage is RocketMQ's default maxMessageSize (4 MiB). The
	// adapter counts the body and the properties together against it.
	DefaultMaxMessage = 4 << 20
	// DefaultMaxInFlight bounds the keys whose events one Publish call
	// sends at once (each key's events go one after another).
	DefaultMaxInFlight = 64
	// DefaultGroup is the producer group Dial registers.
	DefaultGroup = "outbox-relay"
)

// PropertyPrefix is the prefix of the CloudEvents attribute properties
// (CE_id, CE_type, …), after the CloudEvents RocketMQ binding draft.
const PropertyPrefix = "CE_"

var (
	// ErrTopicNotFound is wrapped (as a permanent error) when the broker
	// answers TOPIC_NOT_EXIST (17).
	ErrTopicNotFound = errors.New("topic does not exist in RocketMQ")
	// ErrInvalidTopic is wrapped when an event's topic is not a legal
	// RocketMQ topic name.
	ErrInvalidTopic = errors.New("topic is not a legal RocketMQ topic name")
	// ErrClosed is every event's result after Close. It wraps
	// broker.ErrUnavailable.
	ErrClosed = fmt.Errorf("rocketmqbroker: broker is closed (%w)", broker.ErrUnavailable)
)

// Sender is the part of a RocketMQ producer the Broker uses; a
// rocketmq.Producer is one. It must be started, and should select queues
// with producer.NewHashQueueSelector() so that a sharding key always maps
// to the same queue (Dial sets that up).
type Sender interface {
	SendSync(ctx context.Context, msgs ...*primitive.Message) (*primitive.SendResult, error)
}

// Config configures a Broker. The zero value is ready to use.
type Config struct {
	// Timeout bounds one Publish call. An earlier ctx deadline wins.
	// Default 10s.
	Timeout time.Duration
	// Source is the CloudEvents source attribute (CE_source). Default
	// broker.SourceDefault ("outbox").
	Source string
	// MaxMessage is the largest message, body and properties together,
	// in bytes. Default DefaultMaxMessage; keep it at or below the
	// broker's maxMessageSize.
	MaxMessage int
	// MaxInFlight bounds the keys sent at once by one Publish call.
	// Default DefaultMaxInFlight.
	MaxInFlight int
	// Group is the producer group Dial registers. Default DefaultGroup.
	Group string
	// Options are applied by Dial after the adapter's own producer
	// options (credentials, namespace, TLS, timeouts). New ignores them.
	Options []producer.Option
}

// WithDefaults returns c with the default in every zero field.
func (c Config) WithDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxMessage == 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.Source == "" {
		c.Source = broker.SourceDefault
	}
	return c
}

// validate refuses what WithDefaults left unusable.
func (c Config) validate() error {
	switch {
	case c.Timeout < 0:
		return fmt.Errorf("rocketmqbroker: Config.Timeout is %v; use 0 for the default (%v) or a positive duration", c.Timeout, DefaultTimeout)
	case c.MaxMessage < 0:
		return fmt.Errorf("rocketmqbroker: Config.MaxMessage is %d; use 0 for the default (%d) or a positive size", c.MaxMessage, DefaultMaxMessage)
	case c.MaxInFlight < 0:
		return fmt.Errorf("rocketmqbroker: Config.MaxInFlight is %d; use 0 for the default (%d) or a positive number", c.MaxInFlight, DefaultMaxInFlight)
	}
	if err := broker.CheckSource(c.Source); err != nil {
		return fmt.Errorf("rocketmqbroker: Config.Source %q: %w", c.Source, err)
	}
	return nil
}

// Broker publishes to RocketMQ with synchronous sends. It is safe for
// concurrent use.
type Broker struct {
	s        Sender
	shutdown func() error // Dial's producer; nil for New
	cfg      Config

	gate broker.Gate // Publish calls in progress; Close
}

var (
	_ broker.Broker          = (*Broker)(nil)
	_ broker.ResultPublisher = (*Broker)(nil)
	_ broker.Describer       = (*Broker)(nil)
	_ broker.Checker         = (*Broker)(nil)
)

// New returns a Broker that sends with s, a started producer the caller
// owns and keeps shutting down.
func New(s Sender, cfg Config) (*Broker, error) {
	if s == nil {
		return nil, errors.New("rocketmqbroker: New needs a producer; pass a started rocketmq.Producer or use Dial")
	}
	cfg = cfg.WithDefaults()
	err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return &Broker{s: s, cfg: cfg}, nil
}

// Dial starts a producer for the name servers rawURL names and returns a
// Broker that owns it. rawURL is rocketmq://host:9876[,host2:9876], the
// first address optionally with accesskey:secretkey@ (ACL credentials),
// and an optional query string: group=NAME (Config.Group), namespace=NS,
// source=URI (Config.Source), max_message=BYTES (Config.MaxMessage),
// retries=N (the producer's own retries, default 2).
func Dial(rawURL string, cfg Config) (*Broker, error) {
	addrs, opts, err := parseURL(rawURL, &cfg)
	if err != nil {
		return nil, redact.Error(err, rawURL)
	}
	cfg = cfg.WithDefaults()
	err = cfg.validate()
	if err != nil {
		return nil, err
	}
	all := append([]producer.Option{
		producer.WithNameServer(addrs),
		producer.WithGroupName(cfg.Group),
		producer.WithQueueSelector(producer.NewHashQueueSelector()),
		producer.WithSendMsgTimeout(cfg.Timeout),
	}, opts...)
	all = append(all, cfg.Options...)
	p, err := rocketmq.NewProducer(all...)
	if err != nil {
		return nil, redact.Error(fmt.Errorf("rocketmqbroker: %w", err), rawURL)
	}
	if err := p.Start(); err != nil {
		return nil, redact.Error(fmt.Errorf("rocketmqbroker: start the producer for %s: %w", strings.Join(addrs, ","), err), rawURL)
	}
	b, err := New(p, cfg)
	if err != nil {
		_ = p.Shutdown()
		return nil, err
	}
	b.shutdown = p.Shutdown
	return b, nil
}

// CheckURL reports whether rawURL is a URL Dial understands, without
// starting anything. Its errors never show a secret key.
func CheckURL(rawURL string) error {
	var cfg Config
	if _, _, err := parseURL(rawURL, &cfg); err != nil {
		return redact.Error(err, rawURL)
	}
	err := cfg.WithDefaults().validate()
	return err
}

func parseURL(raw string, cfg *Config) ([]string, []producer.Option, error) {
	hl, err := broker.ParseHostList(raw, broker.HostListSpec{
		Adapter: "rocketmqbroker", Scheme: "rocketmq", Host: "name server", Userinfo: "accesskey:secretkey", Example: "127.0.0.1:9876", RequirePort: true,
	})
	if err != nil {
		return nil, nil, err
	}
	var opts []producer.Option
	if hl.HasUser {
		opts = append(opts, producer.WithCredentials(primitive.Credentials{AccessKey: hl.User, SecretKey: hl.Secret}))
	}
	retries := 2
	if q := hl.Query; q != nil {
		for k, vs := range q {
			v := vs[len(vs)-1]
			switch k {
			case "group":
				cfg.Group = v
			case "namespace":
				opts = append(opts, producer.WithNamespace(v))
			case "source":
				cfg.Source = v
			case "max_message":
				n, err := strconv.Atoi(v)
				if err != nil || n <= 0 {
					return nil, nil, fmt.Errorf("rocketmqbroker: max_message=%q: want a size in bytes, e.g. max_message=4194304", v)
				}
				cfg.MaxMessage = n
			case "retries":
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return nil, nil, fmt.Errorf("rocketmqbroker: retries=%q: want 0 or more", v)
				}
				retries = n
			default:
				return nil, nil, fmt.Errorf("rocketmqbroker: unknown option %q in the URL; known: group, namespace, source, max_message, retries", k)
			}
		}
	}
	opts = append(opts, producer.WithRetry(retries))
	return hl.Hosts, opts, nil
}

// Features declares OrderKey: within a call, a key's events are sent one
// after another to the queue its sharding key hashes to, and once one
// fails the later ones are not sent (broker.ErrNotAttempted). Different
// keys go in parallel, up to Config.MaxInFlight at once.
func (b *Broker) Features() broker.Features {
	return broker.Features{Ordering: broker.OrderKey, MaxMessage: b.cfg.MaxMessage}
}

// Close stops new publishes (they fail with ErrClosed), waits for the
// Publish calls in progress until ctx ends, then shuts the producer down
// if Dial started it. Safe to call more than once.
func (b *Broker) Close(ctx context.Context) error {
	return b.gate.Close(ctx, "rocketmqbroker: closing with sends still waiting for the broker", func() error {
		if b.shutdown != nil {
			if err := b.shutdown(); err != nil {
				return fmt.Errorf("rocketmqbroker: shut the producer down: %w", err)
			}
		}
		return nil
	})
}
