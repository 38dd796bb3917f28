package kafkabroker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/internal/redact"
)

// Defaults for Config fields left at zero.
const (
	DefaultTimeout = 10 * time.Second
	// DefaultMaxMessage is franz-go's own default record batch limit, a
	// little below Kafka's default message.max.bytes (1,048,588), so that
	// a batch the client builds is never refused by a broker left at its
	// defaults.
	DefaultMaxMessage = 1_000_012
	// DefaultClientID is the Kafka client.id the Broker reports.
	DefaultClientID = "outbox-relay"
)

// Header names of the CloudEvents Kafka protocol binding, binary mode.
const (
	// HeaderPrefix is the prefix of the CloudEvents attribute headers
	// (ce_id, ce_type, …).
	HeaderPrefix = "ce_"
	// ContentTypeHeader carries the datacontenttype attribute.
	ContentTypeHeader = "content-type"
)

var (
	// ErrTopicNotFound is wrapped (as a permanent error) when Kafka
	// confirms that an event's topic does not exist.
	ErrTopicNotFound = errors.New("kafka topic does not exist")
	// ErrInvalidTopic is wrapped when an event's topic is not a legal
	// Kafka topic name: at enqueue by Check, at publish as permanent.
	ErrInvalidTopic = errors.New("topic is not a legal Kafka topic name")
	// ErrClosed is every event's result after Close. It wraps
	// broker.ErrUnavailable, so a relay that is shutting down gives its
	// events back without counting an attempt.
	ErrClosed = fmt.Errorf("kafkabroker: broker is closed (%w)", broker.ErrUnavailable)
)

// Config configures a Broker. The zero value is ready to use.
type Config struct {
	// Timeout bounds one Publish call: handing the batch to the producer
	// and waiting for every acknowledgement. An earlier ctx deadline wins.
	// Default 10s.
	Timeout time.Duration
	// Source is the CloudEvents source attribute (ce_source). Default
	// broker.SourceDefault ("outbox").
	Source string
	// MaxMessage is the largest record batch the producer builds, in
	// bytes (franz-go's ProducerBatchMaxBytes); an event whose record
	// alone, with its key, headers and the batch framing, is larger is
	// refused as permanent before it is sent. Keep it at or below the
	// smallest max.message.bytes of the topics the relay writes to, or
	// Kafka refuses whole batches. Default DefaultMaxMessage. With New,
	// 0 means the client's own ProducerBatchMaxBytes.
	MaxMessage int
	// ClientID is the Kafka client.id. Default DefaultClientID. New
	// ignores it.
	ClientID string
	// Options are applied by Dial after kafkabroker's own, to add TLS,
	// SASL or tuning. Options that break the adapter's guarantees
	// (DisableIdempotentWrite, ManualFlushing, TransactionalID, acks
	// other than all) are refused. New ignores them.
	Options []kgo.Opt
}

// WithDefaults returns c with the default in every zero field.
func (c Config) WithDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	if c.Source == "" {
		c.Source = broker.SourceDefault
	}
	return c
}

// validate refuses what WithDefaults left unusable.
func (c Config) validate() error {
	if c.Timeout < 0 {
		return fmt.Errorf("kafkabroker: Config.Timeout is %v; use 0 for the default (%v) or a positive duration", c.Timeout, DefaultTimeout)
	}
	if c.MaxMessage < 0 || (c.MaxMessage > 0 && c.MaxMessage < 512) || c.MaxMessage > 1<<30 {
		return fmt.Errorf("kafkabroker: Config.MaxMessage is %d; use 0 for the default (%d) or a size from 512 bytes to 1 GiB", c.MaxMessage, DefaultMaxMessage)
	}
	if err := broker.CheckSource(c.Source); err != nil {
		return fmt.Errorf("kafkabroker: Config.Source %q: %w", c.Source, err)
	}
	return nil
}

// Broker publishes to Kafka with franz-go's idempotent producer. It is safe
// for concurrent use.
type Broker struct {
	cl    *kgo.Client
	adm   *kadm.Client
	cfg   Config
	owned bool // Dial built cl, so Close closes it

	pingMu sync.Mutex // reachable's cache
	pingAt time.Time
	pingOK bool

	limitsMu sync.Mutex
	limits   map[string]topicLimit // topics' max.message.bytes, learned on MESSAGE_TOO_LARGE

	gate broker.Gate // Publish calls in progress; Close
}

var (
	_ broker.Broker          = (*Broker)(nil)
	_ broker.ResultPublisher = (*Broker)(nil)
	_ broker.Describer       = (*Broker)(nil)
)

// New returns a Broker that produces with cl, a client the caller built
// and keeps closing. cl must keep franz-go's producer defaults that the
// adapter's guarantees rest on: the idempotent producer with acks=all,
// automatic flushing and no transactional id; New refuses a client
// without them. Build it with kgo.ProducerLinger(0), as Dial does: the
// relay waits for every publish call, and franz-go's default linger (10
// ms) adds that much to each.
func New(cl *kgo.Client, cfg Config) (*Broker, error) {
	if cl == nil {
		return nil, errors.New("kafkabroker: New needs a client; pass one from kgo.NewClient or use Dial")
	}
	if err := checkClient(cl); err != nil {
		return nil, err
	}
	if cfg.MaxMessage == 0 {
		if v, ok := cl.OptValue(kgo.ProducerBatchMaxBytes).(int32); ok && v > 0 {
			cfg.MaxMessage = int(v)
		}
	}
	return newBroker(cl, cfg, false)
}

func newBroker(cl *kgo.Client, cfg Config, owned bool) (*Broker, error) {
	cfg = cfg.WithDefaults()
	err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if cfg.MaxMessage == 0 {
		cfg.MaxMessage = DefaultMaxMessage
	}
	return &Broker{cl: cl, adm: kadm.NewClient(cl), cfg: cfg, owned: owned}, nil
}

// checkClient refuses a client whose producer cannot keep the adapter's
// promises.
func checkClient(cl *kgo.Client) error {
	if v, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); v {
		return errors.New("kafkabroker: the client disables the idempotent producer (kgo.DisableIdempotentWrite); the adapter needs it for Kafka's deduplication of retries and per-partition order after a failure")
	}
	if v, _ := cl.OptValue(kgo.ManualFlushing).(bool); v {
		return errors.New("kafkabroker: the client flushes manually (kgo.ManualFlushing); Publish waits for acknowledgements and would wait forever: leave flushing automatic")
	}
	if vs := cl.OptValues(kgo.TransactionalID); len(vs) == 2 {
		if set, _ := vs[1].(bool); set {
			return errors.New("kafkabroker: the client is transactional (kgo.TransactionalID); the adapter produces outside transactions: use a client without a transactional id")
		}
	}
	if acks, ok := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); ok && acks != kgo.AllISRAcks() {
		return errors.New("kafkabroker: the client does not wait for all in-sync replicas (kgo.RequiredAcks); use kgo.AllISRAcks(), the default")
	}
	return nil
}

// Dial builds a franz-go client for the Kafka brokers url names and
// returns a Broker that owns it. url is a comma-separated list of
// host:port seeds, each optionally with the scheme kafka:// (the first may
// carry user:password@ for SASL/PLAIN), and an optional query string:
//
//	client_id=NAME     Kafka client.id (Config.ClientID)
//	max_message=BYTES  Config.MaxMessage
//	source=URI         the CloudEvents source (Config.Source)
//	tls=true           connect with TLS, verifying the server (system roots)
//
// Empty means 127.0.0.1:9092. Dial asks the cluster for its metadata once,
// so a cluster that cannot be reached fails here.
func Dial(rawURL string, cfg Config) (*Broker, error) {
	seeds, opts, err := parseURL(rawURL, &cfg)
	if err != nil {
		return nil, redact.Error(err, rawURL)
	}
	cfg = cfg.WithDefaults()
	err = cfg.validate()
	if err != nil {
		return nil, err
	}
	if cfg.MaxMessage == 0 {
		cfg.MaxMessage = DefaultMaxMessage
	}
	all := append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ClientID(cfg.ClientID),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchMaxBytes(int32(cfg.MaxMessage)),
		// An unknown topic fails its records after one metadata
		// retry instead of four: the adapter then asks the cluster
		// itself before calling the error permanent.
		kgo.UnknownTopicRetries(1),
		kgo.RetryBackoffFn(retryBackoff),
		// A publish call produces its events at once and waits for
		// them: franz-go's default linger (10 ms) would add to every
		// call and batch nothing more; records produced while a
		// request is in flight are batched all the same.
		kgo.ProducerLinger(0),
	}, opts...)
	all = append(all, cfg.Options...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, redact.Error(fmt.Errorf("kafkabroker: %w", err), rawURL)
	}
	if err := checkClient(cl); err != nil {
		cl.Close()
		return nil, err
	}
	b, err := newBroker(cl, cfg, true)
	if err != nil {
		cl.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		if errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.UnsupportedSaslMechanism) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
			return nil, broker.Refused(redact.Error(fmt.Errorf("kafkabroker: connect to %s: %w: check the user and password in the URL (SASL/PLAIN) and the cluster's SASL mechanisms and ACLs", strings.Join(seeds, ","), err), rawURL))
		}
		return nil, redact.Error(fmt.Errorf("kafkabroker: connect to %s: %w; check that a Kafka broker listens there", strings.Join(seeds, ","), err), rawURL)
	}
	return b, nil
}

// CheckURL reports whether rawURL is a broker URL Dial understands (see
// Dial), without connecting: for a command line to refuse a mistake before
// it opens anything else. Its errors never show a password.
func CheckURL(rawURL string) error {
	var cfg Config
	if _, _, err := parseURL(rawURL, &cfg); err != nil {
		return redact.Error(err, rawURL)
	}
	err := cfg.WithDefaults().validate()
	return err
}

// retryBackoff is franz-go's request retry backoff, capped lower (100ms
// doubling to 1s, with jitter from the client) so a broker restart heals
// within a publish deadline.
func retryBackoff(tries int) time.Duration {
	return min(100*time.Millisecond<<min(max(tries-1, 0), 4), time.Second)
}

// parseURL splits a --broker URL into seeds and client options, and fills
// cfg from its query string.
func parseURL(raw string, cfg *Config) ([]string, []kgo.Opt, error) {
	hl, err := broker.ParseHostList(raw, broker.HostListSpec{
		Adapter: "kafkabroker", Scheme: "kafka", Host: "broker address", Userinfo: "user:password", Example: "127.0.0.1:9092",
	})
	if err != nil {
		return nil, nil, err
	}
	var opts []kgo.Opt
	if hl.HasUser {
		opts = append(opts, kgo.SASL(plain.Auth{User: hl.User, Pass: hl.Secret}.AsMechanism()))
	}
	if q := hl.Query; q != nil {
		for k, vs := range q {
			v := vs[len(vs)-1]
			switch k {
			case "client_id":
				cfg.ClientID = v
			case "source":
				cfg.Source = v
			case "max_message":
				n, err := strconv.Atoi(v)
				if err != nil || n <= 0 {
					return nil, nil, fmt.Errorf("kafkabroker: max_message=%q: want a size in bytes, e.g. max_message=1000012", v)
				}
				cfg.MaxMessage = n
			case "tls":
				on, err := strconv.ParseBool(v)
				if err != nil {
					return nil, nil, fmt.Errorf("kafkabroker: tls=%q: want true or false", v)
				}
				if on {
					opts = append(opts, kgo.DialTLS())
				}
			default:
				return nil, nil, fmt.Errorf("kafkabroker: unknown option %q in the broker URL; known: client_id, max_message, source, tls", k)
			}
		}
	}
	return hl.Hosts, opts, nil
}

// Client returns the franz-go client the Broker produces with.
func (b *Broker) Client() *kgo.Client { return b.cl }

// Features declares the ordering unit OrderPartition: franz-go's
// idempotent producer stores a partition's records in order and fails
// every record buffered behind one that failed, so a key's events can be
// pipelined in one call; the later records of a partition that failed
// only behind another are reported with broker.ErrNotAttempted. The
// largest message is Config.MaxMessage. No in-flight bound is declared:
// the producer bounds its own buffer (MaxBufferedRecords) and Publish
// waits for room.
func (b *Broker) Features() broker.Features {
	return broker.Features{Ordering: broker.OrderPartition, MaxMessage: b.cfg.MaxMessage}
}

// Close stops new publishes (they fail with ErrClosed), waits for the
// Publish calls in progress until ctx ends, then closes the client if Dial
// built it. Safe to call more than once.
func (b *Broker) Close(ctx context.Context) error {
	return b.gate.Close(ctx, "kafkabroker: closing with publishes still waiting for acknowledgements", func() error {
		if b.owned {
			b.cl.Close()
		}
		return nil
	})
}
