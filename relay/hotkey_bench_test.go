package relay_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/kafkabroker"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// callTimer is a hook that sums the publish calls' sizes and durations.
type callTimer struct {
	mu     sync.Mutex
	calls  int
	events int
	took   time.Duration
}

func (c *callTimer) OnPublishEnd(_ context.Context, p relay.PublishInfo) {
	c.mu.Lock()
	c.calls++
	c.events += len(p.Events)
	c.took += p.Took
	c.mu.Unlock()
}

// BenchmarkOwnedHotKeysNATS drains a backlog of few keys (OUTBOX_BENCH_KEYS,
// default 1; OUTBOX_BENCH_EVENTS, default 5000) from PostgreSQL through
// NATS JetStream by ownership, and reports the publish calls: events per
// call, the time in a call, and the time per event outside calls.
//
//	go test -run XXX -bench OwnedHotKeysNATS -benchtime 1x ./relay/
func BenchmarkOwnedHotKeysNATS(b *testing.B) {
	benchHotKeys(b, func(b *testing.B) (broker.Broker, string) {
		url := testnats.Shared(b)
		s := testnats.NewStream(b, url)
		br, err := natsbroker.Dial(url, natsbroker.Config{})
		if err != nil {
			b.Fatal(err)
		}
		return br, s.Topic("hot")
	})
}

// BenchmarkOwnedHotKeysKafka is BenchmarkOwnedHotKeysNATS through Kafka: an
// in-process kfake cluster of one broker, a topic of 16 partitions
// (OUTBOX_BENCH_PARTITIONS), on a real loopback port. Kafka keeps a
// partition's order after a failure (OrderPartition), so the dispatcher
// sends a key's claimed events in one call instead of one per
// confirmation: the hot-key case NATS cannot pipeline.
//
//	go test -run XXX -bench OwnedHotKeysKafka -benchtime 1x ./relay/
func BenchmarkOwnedHotKeysKafka(b *testing.B) {
	benchHotKeys(b, func(b *testing.B) (broker.Broker, string) {
		const topic = "hot"
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(envN("OUTBOX_BENCH_PARTITIONS", 16)), topic))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		br, err := kafkabroker.Dial("kafka://"+c.ListenAddrs()[0], kafkabroker.Config{})
		if err != nil {
			b.Fatal(err)
		}
		return br, topic
	})
}

// benchHotKeys is the hot-key drain through the broker newBroker returns
// (it is closed after each run) on its topic.
func benchHotKeys(b *testing.B, newBroker func(*testing.B) (broker.Broker, string)) {
	keys, n := envN("OUTBOX_BENCH_KEYS", 1), envN("OUTBOX_BENCH_EVENTS", 5000)
	for range b.N {
		b.StopTimer()
		o := teststores.Open(b, "postgres", store.Options{})
		br, topic := newBroker(b)
		msgs := make([]outbox.Message, n)
		for i := range msgs {
			msgs[i] = outbox.Message{Topic: topic, Key: fmt.Sprintf("k%d", i%keys), Type: "Bumped", Payload: []byte("x")}
		}
		for i := 0; i < n; i += 1000 {
			if err := o.Store.Enqueue(context.Background(), msgs[i:min(i+1000, n)]...); err != nil {
				b.Fatal(err)
			}
		}
		ct := &callTimer{}
		cfg := relay.Config{Workers: envN("OUTBOX_BENCH_WORKERS", 3), BatchSize: 1000, Logger: quiet, Hooks: []relay.Hook{ct}}
		r, err := relay.New(o.Store, br, cfg)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		b.StartTimer()
		start := time.Now()
		var ru0, ru1 syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
		go func() { done <- r.Run(ctx) }()
		for r.Totals().Delivered.Load() < int64(n) {
			time.Sleep(time.Millisecond)
		}
		el := time.Since(start)
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
		cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
		b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(n), "relay-cpu-µs/ev")
		b.StopTimer()
		cancel()
		<-done
		br.Close(context.Background())
		ct.mu.Lock()
		b.ReportMetric(float64(n)/el.Seconds(), "ev/s")
		b.ReportMetric(float64(ct.events)/float64(ct.calls), "ev/call")
		b.ReportMetric(float64(ct.took.Microseconds())/float64(ct.calls), "µs-in-call")
		b.ReportMetric(float64((el-ct.took).Microseconds())/float64(ct.calls), "µs-between-calls")
		ct.mu.Unlock()
	}
}

func envN(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
