package kafkabroker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/brokertest"
	"github.com/outbox-go/outbox/broker/kafkabroker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// --- helpers

// startKafka starts an in-process Kafka (kfake) listening on real
// 127.0.0.1 ports and returns its bootstrap list, "host:port,…".
func startKafka(t testing.TB, opts ...kfake.Opt) (*kfake.Cluster, string) {
	t.Helper()
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c, strings.Join(c.ListenAddrs(), ",")
}

func client(t testing.TB, seeds string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(seeds, ",")...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func dial(t testing.TB, seeds string, cfg kafkabroker.Config) *kafkabroker.Broker {
	t.Helper()
	b, err := kafkabroker.Dial(seeds, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func uniqueName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

func createTopic(t testing.TB, admin *kgo.Client, topic string, partitions int32) {
	t.Helper()
	if _, err := kafkabroker.EnsureTopics(ctxFor(t, 10*time.Second), admin, partitions, 1, topic); err != nil {
		t.Fatal(err)
	}
}

// receiver consumes one topic from its start with its own franz-go client.
type receiver struct {
	cl  *kgo.Client
	mu  sync.Mutex
	buf []*kgo.Record
}

func newReceiver(t testing.TB, seeds, topic string) *receiver {
	t.Helper()
	return &receiver{cl: client(t, seeds, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))}
}

func (r *receiver) next(ctx context.Context) (*kgo.Record, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// A fetch error is what a consumer sees while a broker restarts (the
	// connection closed under a request): franz-go fetches again, so the
	// receiver keeps polling and names the last error only if ctx ends.
	var last error
	for len(r.buf) == 0 {
		fs := r.cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			if last != nil {
				return nil, fmt.Errorf("%w (last fetch error: %w)", err, last)
			}
			return nil, err
		}
		for _, fe := range fs.Errors() {
			if fe.Err != context.Canceled && fe.Err != context.DeadlineExceeded {
				last = fmt.Errorf("fetch %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
			}
		}
		r.buf = append(r.buf, fs.Records()...)
	}
	rec := r.buf[0]
	r.buf = r.buf[1:]
	return rec, nil
}

func (r *receiver) Next(ctx context.Context) (brokertest.Received, error) {
	rec, err := r.next(ctx)
	if err != nil {
		return brokertest.Received{}, err
	}
	return decode(rec), nil
}

// decode reads the CloudEvents Kafka binding back, as a consumer would.
func decode(rec *kgo.Record) brokertest.Received {
	got := brokertest.Received{Topic: rec.Topic, Key: string(rec.Key), Payload: rec.Value, Headers: map[string]string{}}
	for _, h := range rec.Headers {
		got.Headers[h.Key] = string(h.Value)
	}
	got.EventID = got.Headers["ce_id"]
	got.Type = got.Headers["ce_type"]
	return got
}

func event(topic string, i int) outbox.Event {
	return outbox.Event{ID: int64(i + 1), CreatedAt: time.Now(), Message: outbox.Message{
		EventID: outbox.NewEventID(), Topic: topic, Key: "k", Type: "T", SchemaVersion: 1,
		ContentType: outbox.DefaultContentType, Payload: fmt.Appendf(nil, `{"n":%d}`, i),
	}}
}

// --- the conformance suite, against kfake

func TestConformanceKfake(t *testing.T) {
	_, seeds := startKafka(t)
	admin := client(t, seeds)
	brokertest.Run(t, brokertest.Harness{
		Name: "kafkabroker (kfake)",
		New: func(t *testing.T, topic string) (broker.Broker, brokertest.Receiver) {
			createTopic(t, admin, topic, 1) // one partition: the suite checks arrival order across keys
			return dial(t, seeds, kafkabroker.Config{}), newReceiver(t, seeds, topic)
		},
		MaxPayload: kafkabroker.DefaultMaxMessage,
		Transport:  broker.Kafka,
		AddTopic: func(t *testing.T, _ broker.Broker, topic string) brokertest.Receiver {
			createTopic(t, admin, topic, 1)
			return newReceiver(t, seeds, topic)
		},
	})
}

// restartable is a kfake cluster that keeps its data in a directory and
// can be stopped and started again on the same ports.
type restartable struct {
	mu    sync.Mutex
	c     *kfake.Cluster
	dir   string
	ports []int
}

func startRestartable(t *testing.T) (*restartable, string) {
	t.Helper()
	r := &restartable{dir: t.TempDir()}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(r.dir), kfake.SyncWrites())
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	r.c = c
	for _, a := range c.ListenAddrs() {
		var port int
		if _, err := fmt.Sscanf(a[strings.LastIndexByte(a, ':')+1:], "%d", &port); err != nil {
			t.Fatal(err)
		}
		r.ports = append(r.ports, port)
	}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.c.Close()
	})
	return r, strings.Join(c.ListenAddrs(), ",")
}

func (r *restartable) restart(t *testing.T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.c.Close()
	time.Sleep(300 * time.Millisecond)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(r.ports...), kfake.DataDir(r.dir), kfake.SyncWrites())
	if err != nil {
		t.Fatalf("kfake restart: %v", err)
	}
	r.c = c
}

// The suite again on a one-broker kfake that keeps its log on disk, so
// that the Restart check can stop and start it on the same port.
func TestConformanceKfakeRestart(t *testing.T) {
	r, seeds := startRestartable(t)
	admin := client(t, seeds)
	brokertest.Run(t, brokertest.Harness{
		Name: "kafkabroker (kfake, restartable)",
		New: func(t *testing.T, topic string) (broker.Broker, brokertest.Receiver) {
			createTopic(t, admin, topic, 1)
			return dial(t, seeds, kafkabroker.Config{}), newReceiver(t, seeds, topic)
		},
		MaxPayload: kafkabroker.DefaultMaxMessage,
		Transport:  broker.Kafka,
		Restart:    r.restart,
	})
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
