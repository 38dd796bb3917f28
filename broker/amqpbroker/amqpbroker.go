package amqpbroker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/internal/redact"
	"github.com/outbox-go/outbox/internal/redial"
)

// Defaults for Config fields left at zero.
const (
	DefaultTimeout        = 10 * time.Second
	DefaultMaxMessage     = 16 << 20 // RabbitMQ 4's default max_message_size; 3.x allows 128 MiB
	DefaultConnectionName = "outbox relay"
	DefaultMaxPending     = 1000
)

// AttrPrefix is the prefix of the CloudEvents attribute headers
// (cloudEvents:id, cloudEvents:type, …), as the CloudEvents AMQP binding
// names its application properties.
const AttrPrefix = "cloudEvents:"

var (
	// ErrUnroutable is wrapped when RabbitMQ returned an event (mandatory
	// publish, basic.return): no queue is bound to its routing key. It is
	// transient, since the queue may not be declared yet.
	ErrUnroutable = errors.New("unroutable")
	// ErrNacked is wrapped when RabbitMQ refused an event with basic.nack.
	// It is transient.
	ErrNacked = errors.New("refused by RabbitMQ (basic.nack)")
	// ErrNotConnected is every event's result while the connection or its
	// channel is down and being re-established. It wraps
	// broker.ErrUnavailable.
	ErrNotConnected = fmt.Errorf("amqpbroker: not connected to RabbitMQ (%w)", broker.ErrUnavailable)
	// ErrClosed is every event's result after Close. It wraps
	// broker.ErrUnavailable, so a relay that is shutting down buries nothing.
	ErrClosed = fmt.Errorf("amqpbroker: broker is closed (%w)", broker.ErrUnavailable)
	// ErrTooLarge is wrapped, with outbox.ErrPayloadTooLarge, when an
	// event is larger than Config.MaxMessage with its headers.
	ErrTooLarge = errors.New("message larger than Config.MaxMessage")
)

// Config configures a Broker. The zero value is ready to use.
type Config struct {
	// Exchange is the exchange events are published to, with the event's
	// topic as the routing key. Default "": the default exchange, which
	// routes to the queue named like the topic. Dial takes it from the
	// URL's exchange query parameter when this is empty.
	Exchange string
	// Timeout bounds one Publish call: sending the batch and waiting for
	// every publisher confirm. An earlier ctx deadline wins. Default 10s.
	Timeout time.Duration
	// Source is the CloudEvents source attribute (cloudEvents:source).
	// Default broker.SourceDefault ("outbox").
	Source string
	// MaxMessage is the largest message sent, body and headers together,
	// in bytes; larger events are refused as permanent without being
	// sent. Keep it at or below the server's max_message_size (RabbitMQ
	// closes the channel on a larger message, failing everything in
	// flight on it). Default 16 MiB.
	MaxMessage int
	// MaxPending caps the publishes awaiting a confirm on the channel,
	// across concurrent Publish calls (the relay runs several); a larger
	// batch waits for confirms to free room. It bounds the memory held
	// for confirms, and RabbitMQ confirmed more slowly with thousands of
	// messages unconfirmed on one channel (BENCHMARKS.md, "Broker
	// adapters against their raw clients"). Default 1000.
	MaxPending int
	// ConnectionName is the connection_name client property Dial sets,
	// which the management UI and `rabbitmqctl list_connections name
	// client_properties` show. Default "outbox relay".
	ConnectionName string
	// AMQP is passed to amqp.DialConfig by Dial (TLS, heartbeat, SASL,
	// more client properties); Dial sets connection_name in its Properties
	// unless it holds one, dials with Timeout unless AMQP.Dial is set, and
	// bounds every socket write by Timeout. New ignores it.
	AMQP amqp.Config
}

// WithDefaults returns c with the default in every zero field.
func (c Config) WithDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxMessage == 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	if c.ConnectionName == "" {
		c.ConnectionName = DefaultConnectionName
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
	switch {
	case c.Timeout < 0:
		return fmt.Errorf("amqpbroker: Config.Timeout is %v; use 0 for the default (%v) or a positive duration", c.Timeout, DefaultTimeout)
	case c.MaxMessage < 0:
		return fmt.Errorf("amqpbroker: Config.MaxMessage is %d; use 0 for the default (%d) or a positive size in bytes", c.MaxMessage, DefaultMaxMessage)
	case c.MaxPending < 0:
		return fmt.Errorf("amqpbroker: Config.MaxPending is %d; use 0 for the default (%d) or a positive number", c.MaxPending, DefaultMaxPending)
	case len(c.Exchange) > 255:
		return fmt.Errorf("amqpbroker: Config.Exchange is %d bytes long; AMQP names are at most 255 bytes", len(c.Exchange))
	}
	if err := broker.CheckSource(c.Source); err != nil {
		return fmt.Errorf("amqpbroker: Config.Source %q: %w", c.Source, err)
	}
	return nil
}

// Broker publishes to RabbitMQ (AMQP 0-9-1) with publisher confirms. It is
// safe for concurrent use.
type Broker struct {
	cfg  Config
	url  string           // Dial's URL (with its secrets), to redial
	conn *amqp.Connection // New's connection; nil for Dial
	acfg amqp.Config      // Dial's client configuration

	mu       sync.Mutex
	sess     *session // the live session; nil while reconnecting
	lastErr  error    // why the last session ended or the last attempt failed
	closed   bool
	closing  chan struct{}  // closed by Close
	inflight sync.WaitGroup // Publish calls in progress
	loop     sync.WaitGroup // the reconnect loop
	blocked  *blockState    // resource alarms on New's connection
}

var (
	_ broker.Broker    = (*Broker)(nil)
	_ broker.Describer = (*Broker)(nil)
	_ broker.Checker   = (*Broker)(nil)
)

// Dial connects to RabbitMQ at url, amqp://user:pass@host:5672/vhost or
// amqps://… (empty means amqp://guest:guest@127.0.0.1:5672/), and returns a
// Broker that owns the connection. The URL's exchange query parameter
// names the exchange (Config.Exchange wins); amqp091-go's own parameters
// (heartbeat, connection_timeout, TLS files) work as documented there.
// Dial fails when the server does not answer, refuses the login, or the
// exchange does not exist. A lost connection or channel is re-established
// in the background with capped, jittered backoff (100ms doubling to 5s).
func Dial(rawURL string, cfg Config) (*Broker, error) {
	if rawURL == "" {
		rawURL = "amqp://guest:guest@127.0.0.1:5672/"
	}
	if cfg.Exchange == "" {
		ex, err := exchangeFromURL(rawURL)
		if err != nil {
			return nil, err
		}
		cfg.Exchange = ex
	}
	cfg = cfg.WithDefaults()
	err := cfg.validate()
	if err != nil {
		return nil, err
	}
	acfg := cfg.AMQP
	props := amqp.Table{}
	for k, v := range acfg.Properties {
		props[k] = v
	}
	if _, ok := props["connection_name"]; !ok {
		props["connection_name"] = cfg.ConnectionName
	}
	acfg.Properties = props
	dial := acfg.Dial
	if dial == nil {
		dial = amqp.DefaultDial(cfg.Timeout)
	}
	acfg.Dial = func(network, addr string) (net.Conn, error) {
		c, err := dial(network, addr)
		if err != nil {
			return nil, err
		}
		return &writeDeadlineConn{Conn: c, d: cfg.Timeout}, nil
	}
	b := &Broker{cfg: cfg, url: rawURL, acfg: acfg, closing: make(chan struct{})}
	s, err := b.open()
	if err != nil {
		return nil, redact.Error(fmt.Errorf("amqpbroker: connect to %s: %w", redact.URL(rawURL), err), rawURL)
	}
	if err := b.checkExchange(s); err != nil {
		s.shut()
		return nil, redact.Error(fmt.Errorf("amqpbroker: %s: %w", redact.URL(rawURL), err), rawURL)
	}
	b.start(s)
	return b, nil
}

// writeDeadlineConn bounds every write to the socket by d: amqp091-go
// writes a publish straight to the socket, with no deadline, so a server
// that stopped reading (a blocked connection, a network that drops
// everything) would hold the Publish call, and the relay's claim, past any
// context deadline. A write that cannot finish in d fails, amqp091-go
// closes the connection, the events awaiting confirms fail as unavailable
// and the Broker reconnects.
type writeDeadlineConn struct {
	net.Conn
	d time.Duration
}

func (c *writeDeadlineConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.d))
	return c.Conn.Write(p)
}

// exchangeFromURL reads the exchange query parameter.
func exchangeFromURL(rawURL string) (string, error) {
	_, query, ok := strings.Cut(rawURL, "?")
	if !ok {
		return "", nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", fmt.Errorf("amqpbroker: the query of the URL %s is malformed: %v", redact.URL(rawURL), redact.Error(err, rawURL))
	}
	if v := q["exchange"]; len(v) > 1 {
		return "", fmt.Errorf("amqpbroker: the URL %s names the exchange %d times; name it once", redact.URL(rawURL), len(v))
	}
	return q.Get("exchange"), nil
}

// New returns a Broker that publishes on a channel of its own on conn, a
// connection the caller owns and keeps closing. A lost channel is reopened
// on conn in the background; once conn itself is closed, Publish fails
// with ErrNotConnected until the caller builds a new Broker on a new
// connection. New fails when the channel cannot be opened or the exchange
// does not exist.
func New(conn *amqp.Connection, cfg Config) (*Broker, error) {
	if conn == nil {
		return nil, errors.New("amqpbroker: New needs a connection; pass one from amqp.Dial or use Dial")
	}
	cfg = cfg.WithDefaults()
	err := cfg.validate()
	if err != nil {
		return nil, err
	}
	b := &Broker{cfg: cfg, conn: conn, closing: make(chan struct{})}
	s, err := b.open()
	if err != nil {
		return nil, fmt.Errorf("amqpbroker: %w", err)
	}
	if err := b.checkExchange(s); err != nil {
		s.shut()
		return nil, fmt.Errorf("amqpbroker: %w", err)
	}
	b.start(s)
	return b, nil
}

// checkExchange makes sure the configured exchange exists, on a throwaway
// channel: publishing to a missing exchange would close the publishing
// channel with every event in flight on it.
func (b *Broker) checkExchange(s *session) error {
	if b.cfg.Exchange == "" {
		return nil
	}
	ch, err := s.conn.Channel()
	if err != nil {
		return err
	}
	err = ch.ExchangeDeclarePassive(b.cfg.Exchange, "direct", true, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("exchange %q: %w; declare it first (`outbox broker setup --broker URL --queue NAME --topics LIST` declares it as a topic exchange and binds the queue; or rabbitmqadmin declare exchange name=%s type=topic durable=true), or use the default exchange by leaving exchange= out of the URL", b.cfg.Exchange, err, b.cfg.Exchange)
	}
	return ch.Close()
}

// refusedError is a reconnect that RabbitMQ refused for its credentials.
type refusedError struct{ err *amqp.Error }

func (e refusedError) Error() string {
	return fmt.Sprintf("RabbitMQ refused the credentials of the URL (403 ACCESS_REFUSED: %s): check the user's password and its permissions on the vhost", e.err.Reason)
}

func (e refusedError) Unwrap() error { return e.err }

// start installs the first session and the loop that replaces lost ones.
func (b *Broker) start(s *session) {
	b.sess = s
	b.loop.Add(1)
	go b.maintain(s)
}

// maintain waits for the session to end and opens a new one, with backoff,
// until Close.
func (b *Broker) maintain(s *session) {
	defer b.loop.Done()
	for {
		select {
		case <-s.done:
		case <-b.closing:
			return
		}
		b.mu.Lock()
		if b.sess == s {
			b.sess = nil
			b.lastErr = s.err
		}
		b.mu.Unlock()
		next, ok := redial.Until(b.closing, b.open, func(err error) {
			var ae *amqp.Error
			if errors.As(err, &ae) && ae.Code == amqp.AccessRefused {
				// Say what it is: not an outage but a user name, password
				// or vhost permission that changed under the relay.
				err = refusedError{ae}
			}
			b.mu.Lock()
			b.lastErr = err
			b.mu.Unlock()
		})
		if !ok {
			return
		}
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			next.shut()
			return
		}
		b.sess = next
		b.mu.Unlock()
		s = next
	}
}

// current returns the live session, or the error every event gets while
// there is none.
func (b *Broker) current() (*session, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if b.sess == nil {
		if b.lastErr != nil {
			return nil, fmt.Errorf("%w; it reconnects by itself (last: %v)", ErrNotConnected, redact.Error(b.lastErr, b.url))
		}
		return nil, ErrNotConnected
	}
	return b.sess, nil
}

// Close waits for the Publish calls in progress (or ctx), stops
// reconnecting and closes the channel, and the connection when Dial opened
// it. Events still unconfirmed then fail with ErrClosed. It is safe to
// call more than once.
func (b *Broker) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.closing)
	b.mu.Unlock()

	idle := make(chan struct{})
	go func() { b.inflight.Wait(); close(idle) }()
	var err error
	select {
	case <-idle:
	case <-ctx.Done():
		err = fmt.Errorf("amqpbroker: Close: Publish calls still waiting for confirms: %w", ctx.Err())
	}
	b.loop.Wait()
	b.mu.Lock()
	s := b.sess
	b.sess = nil
	b.mu.Unlock()
	if s != nil {
		s.end(ErrClosed)
		s.shut()
	}
	return err
}

// Features declares Config.MaxMessage as the largest message. The ordering
// unit is OrderNone: RabbitMQ keeps the order of one channel's messages in
// a queue, but a nack, a return or a lost connection for one event does not
// keep a later event of its key from being stored. The Broker bounds
// nothing in flight itself; RabbitMQ's flow control slows the sender.
func (b *Broker) Features() broker.Features {
	return broker.Features{MaxMessage: b.cfg.MaxMessage}
}

// Check reports, before m is enqueued, whether the Broker can deliver it:
// its topic must fit an AMQP routing key (at most 255 bytes), its headers
// must be ones AMQP carries unchanged and does not reserve, and its payload
// with the headers it will carry must fit Config.MaxMessage. It implements
// broker.Checker: use it as store.Options.Check. Errors are
// *outbox.ValidationError.
func (b *Broker) Check(m outbox.Message) error {
	if len(m.Topic) > 255 {
		return &outbox.ValidationError{Field: "Topic", Err: outbox.ErrInvalidMessage, Fix: fmt.Sprintf("it is %d bytes; an AMQP routing key is at most 255 bytes", len(m.Topic))}
	}
	if err := checkHeaders(m.Headers); err != nil {
		return &outbox.ValidationError{Field: "Headers", Err: err, Fix: "rename or remove the header"}
	}
	e := outbox.Event{Message: m, CreatedAt: longestTime}
	if e.EventID == "" {
		e.EventID = "00000000-0000-0000-0000-000000000000"
	}
	if size := messageSize(&e, b.cfg.Source); size > b.cfg.MaxMessage {
		return &outbox.ValidationError{Field: "Payload", Err: outbox.ErrPayloadTooLarge, Fix: fmt.Sprintf(
			"with its headers it takes %d bytes, above the broker's MaxMessage of %d; store large data elsewhere and send a reference, or raise Config.MaxMessage (and RabbitMQ's max_message_size)", size, b.cfg.MaxMessage)}
	}
	return nil
}

// longestTime formats as the longest cloudEvents:time value.
var longestTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
