package natsbroker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/internal/redact"
)

// Defaults for Config fields left at zero.
const (
	DefaultTimeout    = 10 * time.Second
	DefaultMaxPending = 4000
)

// HeaderPrefix is the prefix of the CloudEvents attribute headers
// (ce-id, ce-type, …), as the CloudEvents NATS binding defines it.
const HeaderPrefix = "ce-"

var (
	// ErrNoStream is wrapped (as a permanent error) when JetStream confirms
	// that no stream captures an event's subject.
	ErrNoStream = errors.New("no JetStream stream captures the subject")
	// ErrNotConnected is every event's result while the connection is down
	// or reconnecting. It is transient.
	ErrNotConnected = fmt.Errorf("natsbroker: not connected to NATS (%w)", broker.ErrUnavailable)
	// ErrClosed is every event's result after Close. It is transient, so a
	// relay that is shutting down does not bury events.
	ErrClosed = fmt.Errorf("natsbroker: broker is closed (%w)", broker.ErrUnavailable)
)

// Config configures a Broker. The zero value is ready to use.
type Config struct {
	// Timeout bounds one Publish call: sending the batch and waiting for
	// every PubAck. An earlier ctx deadline wins. Default 10s.
	Timeout time.Duration
	// Source is the CloudEvents source attribute (ce-source). Default
	// broker.SourceDefault ("outbox").
	Source string
	// MaxPending caps the asynchronous publishes awaiting a PubAck on the
	// connection; a larger batch waits for acknowledgements to free room.
	// Default 4000.
	MaxPending int
	// ConnectOptions are applied by Dial after natsbroker's own defaults,
	// so they can add credentials or TLS, or override a default (for
	// example nats.RetryOnFailedConnect(true) to start before the server
	// is up). New ignores them.
	ConnectOptions []nats.Option
}

// WithDefaults returns c with the default in every zero field.
func (c Config) WithDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.Source == "" {
		c.Source = broker.SourceDefault
	}
	return c
}

// validate refuses what WithDefaults left unusable.
func (c Config) validate() error {
	if c.Timeout < 0 {
		return fmt.Errorf("natsbroker: Config.Timeout is %v; use 0 for the default (%v) or a positive duration", c.Timeout, DefaultTimeout)
	}
	if c.MaxPending < 0 {
		return fmt.Errorf("natsbroker: Config.MaxPending is %d; use 0 for the default (%d) or a positive number", c.MaxPending, DefaultMaxPending)
	}
	if err := broker.CheckSource(c.Source); err != nil {
		return fmt.Errorf("natsbroker: Config.Source %q: %w", c.Source, err)
	}
	return nil
}

// Broker publishes to NATS JetStream. It is safe for concurrent use.
type Broker struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	cfg   Config
	owned bool // Dial opened nc, so Close closes it
	// source is Config.Source percent-encoded: the ce-source header.
	source  string
	window  *window  // Config.MaxPending
	replies *replies // the one reply subscription, for every Publish
	watch   *watch   // tells the calls in flight when the connection is lost

	gate broker.Gate // Publish calls in progress; Close
}

var _ broker.Broker = (*Broker)(nil)

// New returns a Broker that publishes on nc, a connection the caller owns
// and keeps closing. For a broker restart to heal by itself, nc should
// reconnect forever (nats.MaxReconnects(-1)); Dial sets that up. The
// first Publish subscribes to a reply inbox on nc (one subscription for
// every Publish; nats.go renews it after a reconnect), and Close
// unsubscribes, so Close leaves nothing behind on nc.
func New(nc *nats.Conn, cfg Config) (*Broker, error) {
	if nc == nil {
		return nil, errors.New("natsbroker: New needs a connection; pass one from nats.Connect or use Dial")
	}
	cfg = cfg.WithDefaults()
	err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return newBroker(nc, cfg, false)
}

func newBroker(nc *nats.Conn, cfg Config, owned bool) (*Broker, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsbroker: %w", err)
	}
	return &Broker{
		nc: nc, js: js, cfg: cfg, owned: owned,
		source:  broker.PercentEncode(cfg.Source),
		window:  &window{free: cfg.MaxPending},
		replies: newReplies(nc, 2*cfg.MaxPending+64),
		watch:   newWatch(nc),
	}, nil
}

// Dial connects to the NATS server(s) at url (comma-separated; empty means
// nats://127.0.0.1:4222) and returns a Broker that owns the connection.
// The connection reconnects forever with backoff (100ms doubling to 5s,
// with jitter) and buffers nothing while disconnected. Dial fails when no
// server answers or JetStream is not enabled.
func Dial(url string, cfg Config) (*Broker, error) {
	cfg = cfg.WithDefaults()
	err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if url == "" {
		url = nats.DefaultURL
	}
	opts := append([]nats.Option{
		nats.Name("outbox relay"),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(reconnectDelay),
		// Fail publishes at once while disconnected instead of buffering
		// them: Publish reports a transient error and the relay backs off.
		nats.ReconnectBufSize(-1),
		nats.PingInterval(10 * time.Second),
	}, cfg.ConnectOptions...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		// nats.go's own errors may quote the URL (a parse error does):
		// redact the whole message, knowing the URL's secrets.
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
			return nil, broker.Refused(redact.Error(fmt.Errorf("natsbroker: connect to %s: %w: check the user and password (or token) in the URL and the server's authorization", redact.URL(url), err), url))
		}
		return nil, redact.Error(fmt.Errorf("natsbroker: connect to %s: %w; check that nats-server runs there with JetStream enabled (-js)", redact.URL(url), err), url)
	}
	b, err := newBroker(nc, cfg, true)
	if err != nil {
		nc.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	if _, err := b.js.AccountInfo(ctx); errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		nc.Close()
		return nil, fmt.Errorf("natsbroker: %s: %w; start nats-server with -js, or enable JetStream for this account", redact.URL(url), err)
	}
	return b, nil
}

// reconnectDelay is the wait before each pass over the server list:
// 100ms doubling up to 5s, plus up to 20% jitter so relays do not
// reconnect in lockstep.
func reconnectDelay(attempts int) time.Duration {
	d := 100 * time.Millisecond << min(max(attempts-1, 0), 6)
	d = min(d, 5*time.Second)
	return d + rand.N(d/5+1)
}

// Conn returns the connection the Broker publishes on.
func (b *Broker) Conn() *nats.Conn { return b.nc }

// sendError returns the permanent error for a send failure that concerns
// this event alone, or nil when the failure concerns the connection.
func (b *Broker) sendError(e *outbox.Event, err error) error {
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		// message sized the event against the max_payload of the server
		// the batch began with; the connection moved to a smaller one
		return broker.Permanent(tooLarge(e.EventID, len(e.Payload), headerSize(e, b.source), int(b.nc.MaxPayload())))
	case errors.Is(err, nats.ErrBadSubject):
		return broker.Permanentf("natsbroker: event %s: topic %q: %w: %w", e.EventID, e.Topic, ErrInvalidSubject, err)
	case errors.Is(err, nats.ErrBadHeaderMsg):
		return broker.Permanentf("natsbroker: event %s: nats.go refused its headers: %w", e.EventID, err)
	}
	return nil
}

// ackError classifies the error an async publish reported for e.
func (b *Broker) ackError(ctx context.Context, e *outbox.Event, err error, lookups map[string]error) error {
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		v, ok := lookups[e.Topic]
		if !ok {
			v = b.noResponder(ctx, e.Topic)
			lookups[e.Topic] = v
		}
		return v
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamMessageExceedsMaximum, jsErrCodeStreamHeaderExceedsMaximum:
			return broker.Permanentf("natsbroker: event %s on %q is larger than the stream allows (max_msg_size / header limit): %w", e.EventID, e.Topic, err)
		}
	}
	return fmt.Errorf("natsbroker: event %s on %q not confirmed: %w", e.EventID, e.Topic, err)
}

// jsErrCodeStreamHeaderExceedsMaximum is nats-server's
// JSStreamHeaderExceedsMaximumErr, which nats.go does not name.
const jsErrCodeStreamHeaderExceedsMaximum jetstream.ErrorCode = 10097

// noResponder decides what "no responders" on subject means. Only when
// JetStream itself says no stream captures the subject is it permanent;
// right after a server restart streams may not answer yet.
func (b *Broker) noResponder(ctx context.Context, subject string) error {
	name, err := b.js.StreamNameBySubject(ctx, subject)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return broker.Permanent(noStreamError{subject})
	case err == nil:
		return fmt.Errorf("natsbroker: stream %q captures subject %q but did not answer (JetStream may be starting or electing a leader); retry later: %w", name, subject, jetstream.ErrNoStreamResponse)
	default:
		return fmt.Errorf("natsbroker: no JetStream stream answered on subject %q and looking the stream up failed (%v); retry later: %w", subject, err, jetstream.ErrNoStreamResponse)
	}
}

type noStreamError struct{ subject string }

func (e noStreamError) Error() string {
	return fmt.Sprintf("natsbroker: no JetStream stream captures subject %q; create one (outbox broker setup --broker URL --stream NAME --subjects '%s') or fix the topic", e.subject, e.subject)
}

func (e noStreamError) Is(target error) bool {
	return target == ErrNoStream || target == jetstream.ErrNoStreamResponse
}

// Close stops new publishes (they fail with ErrClosed), waits for the
// Publish calls in progress until ctx ends, then drops the reply
// subscription and closes the connection if Dial opened it. A call still
// waiting for PubAcks then returns at once: each event not confirmed yet
// fails with ErrClosed, transient, since JetStream may or may not have
// stored it (the relay publishes it again; a duplicate is dropped within
// the stream's duplicate window), and PubAcks that come later are ignored.
// Safe to call more than once; later calls wait for the first to finish or
// ctx to end.
func (b *Broker) Close(ctx context.Context) error {
	return b.gate.Close(ctx, "natsbroker: closing with publishes still waiting for PubAcks", func() error {
		b.replies.close()
		if b.owned {
			b.nc.Close()
		}
		// The connection watch stops within connCheck of the last call.
		if stopped := b.watch.stopped(); stopped != nil {
			select {
			case <-stopped:
			case <-ctx.Done():
			}
		}
		return nil
	})
}
