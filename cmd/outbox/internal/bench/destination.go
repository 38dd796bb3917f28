package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/internal/redact"
)

// destination is the broker side of one run: the fresh place the relay
// publishes to, created for the run and removed after it, and how the bench
// watches what arrived there without going through the relay.
type destination interface {
	// relayURL is the --broker URL the relay processes get.
	relayURL() string
	// topic is the topic (subject) of one phase: "orders" (raw publish
	// and drain), "latency" or "floor".
	topic(phase string) string
	// dial opens the adapter that the raw publish and the in-process
	// relay use, as `outbox relay` opens it.
	dial() (broker.Broker, error)
	// stored is how many messages the orders topic holds.
	stored(ctx context.Context) (uint64, error)
	// receive calls got with the event id and the receipt time of every
	// message published to the latency topic, until stop is called.
	receive(ctx context.Context, got func(id string, at time.Time)) (stop func(), err error)
	// publishOne publishes one small message to the floor topic and
	// waits for the broker's acknowledgement.
	publishOne(ctx context.Context) error
	// close removes what the run created and closes the connections.
	close()
}

// openDestination connects to c.BrokerURL and creates the run's stream or
// topics, named after suffix; res learns what is measured.
func openDestination(ctx context.Context, c Config, suffix string, res *Result) (destination, error) {
	switch brokerKind(c.BrokerURL) {
	case "nats":
		res.Broker, res.FloorAt = "NATS JetStream", "1 JetStream publish"
		return openNATS(ctx, c.BrokerURL, suffix)
	case "kafka", "kfake":
		d, err := openKafka(ctx, c, suffix)
		if err != nil {
			return nil, err
		}
		res.Broker, res.Partitions, res.FloorAt = d.label, c.Partitions, "1 synchronous Kafka produce"
		return d, nil
	}
	return nil, unsupported(c.BrokerURL)
}

// brokerKind is "nats", "kafka", "kfake" or "" (not measured by bench).
func brokerKind(raw string) string {
	if strings.EqualFold(raw, "kfake") {
		return "kfake"
	}
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok {
		return ""
	}
	switch strings.ToLower(scheme) {
	case "nats":
		return "nats"
	case "kafka":
		return "kafka"
	}
	return ""
}

// Brokers is what --broker may be, for messages.
const Brokers = "nats://host:4222, kafka://host:9092[,host2:9092] or kfake (an in-process Kafka-protocol cluster)"

func unsupported(raw string) error {
	return fmt.Errorf("bench: --broker must be %s, not %q", Brokers, redact.URL(raw))
}

// natsDestination is a JetStream stream of the run's subjects.
type natsDestination struct {
	raw     string
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  jetstream.Stream
	subject string
}

func openNATS(ctx context.Context, raw, suffix string) (*natsDestination, error) {
	nc, err := nats.Connect(raw)
	if err != nil {
		return nil, redact.Error(fmt.Errorf("bench: connect to NATS at %s: %w", redact.URL(raw), err), raw)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	subject := "bench_" + suffix
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUTBOX_BENCH_" + suffix, Subjects: []string{subject + ".>"}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: create stream: %w", err)
	}
	return &natsDestination{raw: raw, nc: nc, js: js, stream: stream, subject: subject}, nil
}

func (d *natsDestination) relayURL() string          { return d.raw }
func (d *natsDestination) topic(phase string) string { return d.subject + "." + phase }

func (d *natsDestination) dial() (broker.Broker, error) {
	return natsbroker.Dial(d.raw, natsbroker.Config{})
}

func (d *natsDestination) stored(ctx context.Context) (uint64, error) {
	info, err := d.stream.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// receive subscribes to the latency subject with core NATS: a message
// arrives there as JetStream stores it, with its event id in Nats-Msg-Id.
func (d *natsDestination) receive(_ context.Context, got func(string, time.Time)) (func(), error) {
	sub, err := d.nc.Subscribe(d.topic("latency"), func(m *nats.Msg) {
		got(m.Header.Get("Nats-Msg-Id"), time.Now())
	})
	if err != nil {
		return nil, err
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

func (d *natsDestination) publishOne(ctx context.Context) error {
	_, err := d.js.Publish(ctx, d.topic("floor"), []byte("x"))
	return err
}

func (d *natsDestination) close() {
	_ = d.js.DeleteStream(context.Background(), d.stream.CachedInfo().Config.Name)
	d.nc.Close()
}
