package mqttbroker

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/paho"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/internal/redact"
	"github.com/outbox-go/outbox/internal/redial"
)

// Defaults for Config fields left at zero.
const (
	DefaultTimeout   = 10 * time.Second
	DefaultKeepAlive = 30 * time.Second
	// MaxPacket is the largest packet MQTT can frame (a 4-byte variable
	// byte integer): the default MaxMessage when the server names none.
	MaxPacket = 268_435_455
)

var (
	// ErrNotConnected is every event's result while the connection is down
	// and being re-established. It wraps broker.ErrUnavailable.
	ErrNotConnected = fmt.Errorf("mqttbroker: not connected to the MQTT server (%w)", broker.ErrUnavailable)
	// ErrClosed is every event's result after Close. It wraps
	// broker.ErrUnavailable.
	ErrClosed = fmt.Errorf("mqttbroker: broker is closed (%w)", broker.ErrUnavailable)
	// ErrConnectionLost is wrapped when the connection went away before the
	// PUBACK of an event came. It wraps broker.ErrUnavailable.
	ErrConnectionLost = fmt.Errorf("the connection was lost before the PUBACK (%w)", broker.ErrUnavailable)
	// ErrRefused is wrapped when the server answered a PUBLISH with a
	// PUBACK reason code of 0x80 or more.
	ErrRefused = errors.New("refused by the MQTT server (PUBACK reason code)")
	// ErrInvalidTopic is wrapped when an event's topic is not an MQTT topic
	// name one can publish to.
	ErrInvalidTopic = errors.New("topic is not an MQTT topic name one can publish to")
	// ErrTooLarge is wrapped, with outbox.ErrPayloadTooLarge, when an
	// event's PUBLISH packet would be larger than MaxMessage.
	ErrTooLarge = errors.New("PUBLISH packet larger than the maximum packet size")
)

// Config configures a Broker. The zero value is ready to use.
type Config struct {
	// ClientID is the MQTT client identifier Dial connects with; two
	// connections with one id push each other off the server. Default
	// "outbox-relay-" and 8 random hex digits; Dial takes it from the URL's
	// client_id parameter when this is empty.
	ClientID string
	// Timeout bounds one Publish call (sending and every PUBACK), and
	// Dial's connect. An earlier ctx deadline wins. Default 10s.
	Timeout time.Duration
	// KeepAlive is the MQTT keep-alive Dial asks for. Default 30s.
	KeepAlive time.Duration
	// Source is the CloudEvents source attribute (the source user
	// property). Default broker.SourceDefault ("outbox").
	Source string
	// MaxMessage is the largest PUBLISH packet sent (topic, properties and
	// payload); a larger event is refused as permanent without being sent.
	// Default: the Maximum Packet Size of the server's CONNACK, or MQTT's
	// limit (MaxPacket) when it names none. A value above the server's is
	// lowered to it.
	MaxMessage int
	// TLS configures mqtts:// connections (nil: verify the server against
	// the system roots, for the URL's host name). Dial ignores it for
	// mqtt://.
	TLS *tls.Config
}

// WithDefaults returns c with the default in every zero field.
func (c Config) WithDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.ClientID == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.ClientID = "outbox-relay-" + hex.EncodeToString(b[:])
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
		return fmt.Errorf("mqttbroker: Config.Timeout is %v; use 0 for the default (%v) or a positive duration", c.Timeout, DefaultTimeout)
	case c.KeepAlive < 0 || c.KeepAlive > 65535*time.Second:
		return fmt.Errorf("mqttbroker: Config.KeepAlive is %v; use 0 for the default (%v) or up to 18h12m15s", c.KeepAlive, DefaultKeepAlive)
	case c.MaxMessage < 0 || c.MaxMessage > MaxPacket:
		return fmt.Errorf("mqttbroker: Config.MaxMessage is %d; use 0 for the server's limit, or a size up to %d bytes", c.MaxMessage, MaxPacket)
	}
	if err := broker.CheckSource(c.Source); err != nil {
		return fmt.Errorf("mqttbroker: Config.Source %q: %w", c.Source, err)
	}
	return nil
}

// Broker publishes to an MQTT 5 server at QoS 1. It is safe for concurrent
// use.
type Broker struct {
	cfg     Config
	addr    string // Dial's host:port
	tls     bool
	user    *url.Userinfo
	rawURL  string
	borrow  *paho.Client // New's client
	limitMu sync.Mutex
	limit   int // the largest packet: Config.MaxMessage or the server's

	mu       sync.Mutex
	client   *link // the live connection; nil while reconnecting
	lastErr  error
	closed   bool
	closing  chan struct{}
	inflight sync.WaitGroup
	loop     sync.WaitGroup
}

var (
	_ broker.Broker    = (*Broker)(nil)
	_ broker.Describer = (*Broker)(nil)
	_ broker.Checker   = (*Broker)(nil)
)

// Dial connects to the MQTT 5 server at url, mqtt://[user[:password]@]host[:1883]
// or mqtts://…:8883 (empty means mqtt://127.0.0.1:1883), and returns a
// Broker that owns the connection. The URL's client_id parameter sets
// Config.ClientID. It connects with Clean Start and a Session Expiry
// Interval of 0: the server keeps nothing of the relay's between
// connections, since the outbox table is the durable copy of every event
// not yet acknowledged. A lost connection is re-established in the
// background with capped, jittered backoff (100ms doubling to 5s); Publish
// fails fast with ErrNotConnected meanwhile. Dial fails when the server does
// not answer or refuses the connection.
func Dial(rawURL string, cfg Config) (*Broker, error) {
	if rawURL == "" {
		rawURL = "mqtt://127.0.0.1:1883"
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, redact.Error(fmt.Errorf("mqttbroker: %s is not a URL: %w", redact.URL(rawURL), err), rawURL)
	}
	b := &Broker{rawURL: rawURL, user: u.User, closing: make(chan struct{})}
	switch strings.ToLower(u.Scheme) {
	case "mqtt", "tcp":
		b.addr = hostPort(u, "1883")
	case "mqtts", "ssl", "tls":
		b.addr, b.tls = hostPort(u, "8883"), true
	default:
		return nil, fmt.Errorf("mqttbroker: %s: scheme %q; use mqtt:// or mqtts://", redact.URL(rawURL), u.Scheme)
	}
	if cfg.ClientID == "" {
		cfg.ClientID = u.Query().Get("client_id")
	}
	b.cfg = cfg.WithDefaults()
	if err = b.cfg.validate(); err != nil {
		return nil, err
	}
	c, err := b.connect()
	if err != nil {
		return nil, redact.Error(fmt.Errorf("mqttbroker: connect to %s: %w", redact.URL(rawURL), err), rawURL)
	}
	b.client = c
	b.loop.Add(1)
	go b.maintain(c)
	return b, nil
}

func hostPort(u *url.URL, port string) string {
	h := u.Hostname()
	if h == "" {
		h = "127.0.0.1"
	}
	if p := u.Port(); p != "" {
		port = p
	}
	return net.JoinHostPort(h, port)
}

// New returns a Broker that publishes at QoS 1 with c, a paho client that
// has connected (Connect returned nil) and that the caller owns. Once c's
// connection ends, Publish fails with ErrNotConnected: a paho.Client serves
// one connection, so build a new Broker on a new client (or use Dial,
// which reconnects). The server's maximum packet size is not known through
// c: set Config.MaxMessage to it if the server has one.
func New(c *paho.Client, cfg Config) (*Broker, error) {
	if c == nil {
		return nil, errors.New("mqttbroker: New needs a connected paho client; build one with paho.NewClient and Connect, or use Dial")
	}
	cfg = cfg.WithDefaults()
	err := cfg.validate()
	if err != nil {
		return nil, err
	}
	b := &Broker{cfg: cfg, borrow: c, client: &link{c: c, lost: &lostReason{}}, closing: make(chan struct{}), limit: cfg.MaxMessage}
	if b.limit == 0 {
		b.limit = MaxPacket
	}
	return b, nil
}

// link is one connection and why it ended.
type link struct {
	c     *paho.Client
	lost  *lostReason
	sess  *ackSession // nil for New's client: events then go one at a time
	pubMu sync.Mutex  // one batch at a time writes its PUBLISH packets
}

// connect opens one connection: TCP (or TLS), then CONNECT and CONNACK.
func (b *Broker) connect() (*link, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.Timeout)
	defer cancel()
	d := net.Dialer{Timeout: b.cfg.Timeout}
	tcp, err := d.DialContext(ctx, "tcp", b.addr)
	if err != nil {
		return nil, err
	}
	conn := tcp
	if b.tls {
		tc := b.cfg.TLS.Clone()
		if tc == nil {
			tc = &tls.Config{}
		}
		if tc.ServerName == "" {
			tc.ServerName, _, _ = net.SplitHostPort(b.addr)
		}
		tlsConn := tls.Client(tcp, tc)
		if err := tlsConn.HandshakeContext(ctx); err != nil {
			_ = tcp.Close()
			return nil, err
		}
		conn = tlsConn
	}
	conn = newQuickAckConn(conn, tcp, b.cfg.Timeout)
	lost := &lostReason{}
	sess := newAckSession()
	c := paho.NewClient(paho.ClientConfig{
		ClientID:           b.cfg.ClientID,
		Conn:               conn,
		Session:            sess,
		PacketTimeout:      24 * time.Hour, // each Publish call has its own deadline
		OnClientError:      lost.set,
		OnServerDisconnect: func(d *paho.Disconnect) { lost.set(disconnectError(d)) },
	})
	cp := &paho.Connect{
		ClientID:   b.cfg.ClientID,
		KeepAlive:  uint16(b.cfg.KeepAlive / time.Second),
		CleanStart: true,
		Properties: &paho.ConnectProperties{RequestProblemInfo: true},
	}
	if b.user != nil {
		cp.Username, cp.UsernameFlag = b.user.Username(), true
		if pw, ok := b.user.Password(); ok {
			cp.Password, cp.PasswordFlag = []byte(pw), true
		}
	}
	ca, err := c.Connect(ctx, cp)
	if err != nil {
		_ = conn.Close()
		_ = sess.Close()
		if ca != nil && ca.Properties != nil && ca.Properties.ReasonString != "" {
			err = fmt.Errorf("%w (%s)", err, ca.Properties.ReasonString)
		}
		if ca != nil && loginRefused(ca.ReasonCode) {
			err = broker.Refused(fmt.Errorf("%w: check the user name and password in the URL and the broker's ACL", err))
		}
		return nil, err
	}
	limit := b.cfg.MaxMessage
	if limit == 0 {
		limit = MaxPacket
	}
	if ca.Properties != nil && ca.Properties.MaximumPacketSize != nil && int(*ca.Properties.MaximumPacketSize) < limit {
		limit = int(*ca.Properties.MaximumPacketSize)
	}
	b.limitMu.Lock()
	b.limit = limit
	b.limitMu.Unlock()
	return &link{c: c, lost: lost, sess: sess}, nil
}

// lostReason keeps the first reason paho gave for the end of a connection.
type lostReason struct {
	mu  sync.Mutex
	err error
}

func (l *lostReason) set(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.mu.Unlock()
}

func (l *lostReason) get() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func disconnectError(d *paho.Disconnect) error {
	if d.Properties != nil && d.Properties.ReasonString != "" {
		return fmt.Errorf("the server disconnected (reason code 0x%02x: %s)", d.ReasonCode, d.Properties.ReasonString)
	}
	return fmt.Errorf("the server disconnected (reason code 0x%02x)", d.ReasonCode)
}

// maintain waits for the connection to end and opens a new one, with
// backoff, until Close.
func (b *Broker) maintain(c *link) {
	defer b.loop.Done()
	for {
		select {
		case <-c.c.Done():
		case <-b.closing:
			return
		}
		_ = c.sess.Close()
		why := c.lost.get()
		if why == nil {
			why = errors.New("the connection closed")
		}
		b.mu.Lock()
		if b.client == c {
			b.client, b.lastErr = nil, why
		}
		b.mu.Unlock()
		next, ok := redial.Until(b.closing, b.connect, func(err error) {
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
			next.disconnect()
			return
		}
		b.client = next
		b.mu.Unlock()
		c = next
	}
}

// disconnect ends a Dial connection with a DISCONNECT.
func (l *link) disconnect() {
	_ = l.c.Disconnect(&paho.Disconnect{ReasonCode: 0})
	select {
	case <-l.c.Done():
	case <-time.After(5 * time.Second):
	}
	_ = l.sess.Close()
}

// current returns the live client, or the error every event gets while
// there is none.
func (b *Broker) current() (*link, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if b.client != nil {
		select {
		case <-b.client.c.Done():
			if b.borrow != nil {
				return nil, fmt.Errorf("%w: the paho client given to New has disconnected; build a new Broker on a new client", ErrNotConnected)
			}
			return nil, ErrNotConnected
		default:
			return b.client, nil
		}
	}
	if b.lastErr != nil {
		return nil, fmt.Errorf("%w; it reconnects by itself (last: %v)", ErrNotConnected, redact.Error(b.lastErr, b.rawURL))
	}
	return nil, ErrNotConnected
}

// Close waits for the Publish calls in progress (or ctx), stops
// reconnecting and disconnects, when Dial made the connection (New's client
// stays connected). It is safe to call more than once.
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
		err = fmt.Errorf("mqttbroker: Close: Publish calls still waiting for PUBACKs: %w", ctx.Err())
	}
	b.loop.Wait()
	b.mu.Lock()
	c := b.client
	b.client = nil
	b.mu.Unlock()
	if c != nil && b.borrow == nil {
		c.disconnect()
	}
	return err
}

// Features declares the largest PUBLISH packet (Config.MaxMessage, or the
// server's Maximum Packet Size once connected). The ordering unit is
// OrderNone: a Publish call writes its events in order, but the server
// taking a later event does not depend on it taking an earlier one (a
// PUBACK with quota exceeded for one, success for the next). The Broker
// bounds what it has in flight itself (the server's Receive Maximum, which
// paho's session keeps), so it declares no bound for the relay.
func (b *Broker) Features() broker.Features {
	return broker.Features{MaxMessage: b.maxMessage()}
}

func (b *Broker) maxMessage() int {
	b.limitMu.Lock()
	defer b.limitMu.Unlock()
	return b.limit
}

// Check reports, before m is enqueued, whether the Broker can deliver it:
// its topic must be an MQTT topic name one can publish to, its headers
// ones MQTT carries unchanged and does not reserve, and its PUBLISH packet
// must fit MaxMessage. It implements broker.Checker: use it as
// store.Options.Check. Errors are *outbox.ValidationError.
func (b *Broker) Check(m outbox.Message) error {
	if why := topicProblem(m.Topic); why != "" {
		return &outbox.ValidationError{Field: "Topic", Err: ErrInvalidTopic, Fix: why}
	}
	if err := broker.CheckHeaders(broker.MQTT, m.Headers); err != nil {
		return &outbox.ValidationError{Field: "Headers", Err: err, Fix: "rename or remove the header"}
	}
	e := outbox.Event{Message: m, CreatedAt: longestTime}
	if e.EventID == "" {
		e.EventID = "00000000-0000-0000-0000-000000000000"
	}
	if size, limit := packetSize(&e, b.cfg.Source), b.maxMessage(); size > limit {
		return &outbox.ValidationError{Field: "Payload", Err: outbox.ErrPayloadTooLarge, Fix: fmt.Sprintf(
			"its PUBLISH packet takes %d bytes with the topic and properties, above the maximum packet size of %d; store large data elsewhere and send a reference, or raise the server's max_packet_size", size, limit)}
	}
	return nil
}

// longestTime formats as the longest time property value.
var longestTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)

// loginRefused reports whether a CONNACK reason code is a refusal no retry
// fixes: bad user name or password (0x86), not authorized (0x87), bad
// authentication method (0x8C).
func loginRefused(code byte) bool {
	return code == 0x86 || code == 0x87 || code == 0x8C
}
