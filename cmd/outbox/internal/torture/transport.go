package torture

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/inbox/natsmsg"
	"github.com/outbox-go/outbox/internal/redact"
)

// transport is what the run needs from a broker: a fresh destination, the
// address the relays' link is proxied to, a consumer that reports every
// delivery, and (for an embedded broker) a restart. A broker adapter that
// lands later implements it and registers in transports; the matrix then
// gets its cells with one line each.
type transport interface {
	// Name is the broker's name in the summary ("nats").
	Name() string
	// Target is the broker's host:port, which the relays reach through a
	// proxy.
	Target() string
	// RelayURL is the --broker URL for a relay whose link goes through the
	// proxy at addr.
	RelayURL(addr string) string
	// Topic is the destination the workload enqueues to.
	Topic() string
	// Consume calls handle for every delivery, one at a time, until ctx
	// ends; handle returns whether to acknowledge.
	Consume(ctx context.Context, handle func(received) bool) error
	// Drained reports that everything the broker holds was delivered and
	// acknowledged.
	Drained(ctx context.Context) (bool, error)
	// Restartable reports whether Restart works.
	Restartable() bool
	// Restart stops the broker for down and starts it again with its data.
	Restart(down time.Duration) error
	// Close deletes the destination and disconnects.
	Close()
}

// received is one delivery.
type received struct {
	Msg          inbox.Message
	Err          error // the message could not be read as an outbox event
	Payload      []byte
	StreamSeq    uint64
	NumDelivered uint64
}

// transports opens a transport by broker name. brokerURL empty means an
// embedded broker with its data under dir.
var transports = map[string]func(ctx context.Context, brokerURL, dir string) (transport, error){
	"nats": openNATS,
}

// natsTransport is NATS JetStream: a stream with a unique subject, and a
// durable pull consumer with explicit acks.
type natsTransport struct {
	url      string
	embedded *embeddedNATS
	nc       *nats.Conn
	js       jetstream.JetStream
	stream   string
	subject  string
	cons     jetstream.Consumer
}

func openNATS(ctx context.Context, brokerURL, dir string) (transport, error) {
	t := &natsTransport{url: brokerURL}
	if brokerURL == "" {
		e, err := startEmbeddedNATS(dir)
		if err != nil {
			return nil, err
		}
		t.embedded, t.url = e, e.URL()
	}
	nc, err := nats.Connect(t.url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.Name("outbox torture consumer"))
	if err != nil {
		t.Close()
		return nil, redact.Error(fmt.Errorf("torture: connect to NATS at %s: %w", redact.URL(t.url), err), t.url)
	}
	t.nc = nc
	if t.js, err = jetstream.New(nc); err != nil {
		t.Close()
		return nil, err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	t.stream, t.subject = "TORTURE_"+strings.ToUpper(id), "torture"+id
	if _, err := t.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: t.stream, Subjects: []string{t.subject + ".>"}, Storage: jetstream.FileStorage,
		Duplicates: 2 * time.Minute,
	}); err != nil {
		t.Close()
		return nil, fmt.Errorf("torture: create stream: %w", err)
	}
	if t.cons, err = t.js.CreateOrUpdateConsumer(ctx, t.stream, jetstream.ConsumerConfig{
		// AckWait well above the consumer's worst stall, so redeliveries
		// come from faults, not from a slow database under load.
		Durable: "torture", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		MaxAckPending: 128, MaxDeliver: -1,
	}); err != nil {
		t.Close()
		return nil, fmt.Errorf("torture: create consumer: %w", err)
	}
	return t, nil
}

func (t *natsTransport) Name() string  { return "nats" }
func (t *natsTransport) Topic() string { return t.subject + ".events" }

func (t *natsTransport) Target() string {
	u, err := url.Parse(strings.Split(t.url, ",")[0])
	if err != nil || u.Host == "" {
		return "127.0.0.1:4222"
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "4222")
	}
	return u.Host
}

func (t *natsTransport) RelayURL(addr string) string { return "nats://" + addr }

func (t *natsTransport) Consume(ctx context.Context, handle func(received) bool) error {
	cc, err := t.cons.Consume(func(m jetstream.Msg) {
		r := received{Payload: m.Data()}
		if md, err := m.Metadata(); err == nil {
			r.StreamSeq, r.NumDelivered = md.Sequence.Stream, md.NumDelivered
		}
		r.Msg, r.Err = natsmsg.FromJetStream(m)
		if handle(r) {
			_ = m.Ack()
		} else {
			_ = m.NakWithDelay(50 * time.Millisecond)
		}
	}, jetstream.PullMaxMessages(32))
	if err != nil {
		return err
	}
	<-ctx.Done()
	cc.Stop()
	<-cc.Closed()
	return nil
}

func (t *natsTransport) Drained(ctx context.Context) (bool, error) {
	ci, err := t.cons.Info(ctx)
	if err != nil {
		return false, err
	}
	return ci.NumPending == 0 && ci.NumAckPending == 0 && ci.NumRedelivered == 0, nil
}

func (t *natsTransport) Restartable() bool { return t.embedded != nil }

func (t *natsTransport) Restart(down time.Duration) error {
	if t.embedded == nil {
		return errors.New("torture: the broker is not embedded; it cannot be restarted from here")
	}
	return t.embedded.Restart(down)
}

func (t *natsTransport) Close() {
	if t.js != nil && t.stream != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = t.js.DeleteStream(ctx, t.stream)
		cancel()
	}
	if t.nc != nil {
		t.nc.Close()
	}
	if t.embedded != nil {
		t.embedded.Stop()
	}
}

// embeddedNATS is a nats-server with JetStream in this process that can be
// stopped and started again on the same port and storage.
type embeddedNATS struct {
	mu   sync.Mutex
	srv  *server.Server
	port int
	dir  string
}

func startEmbeddedNATS(dir string) (*embeddedNATS, error) {
	e := &embeddedNATS{port: server.RANDOM_PORT, dir: dir}
	if err := e.start(); err != nil {
		return nil, err
	}
	e.port = e.srv.Addr().(*net.TCPAddr).Port
	return e, nil
}

func (e *embeddedNATS) start() error {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: e.port, JetStream: true, StoreDir: e.dir, NoLog: true, NoSigs: true})
	if err != nil {
		return fmt.Errorf("torture: embedded nats-server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(15 * time.Second) {
		srv.Shutdown()
		return errors.New("torture: embedded nats-server not ready within 15s")
	}
	e.mu.Lock()
	e.srv = srv
	e.mu.Unlock()
	return nil
}

func (e *embeddedNATS) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", e.port) }

func (e *embeddedNATS) Stop() {
	e.mu.Lock()
	srv := e.srv
	e.srv = nil
	e.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

func (e *embeddedNATS) Restart(down time.Duration) error {
	e.Stop()
	time.Sleep(down)
	return e.start()
}
