package amqpbroker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/internal/teststores"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
)

// benchEvents is the backlog size of BenchmarkRelayDrain:
// OUTBOX_BENCH_EVENTS, default 100,000.
func benchEvents(b *testing.B) int {
	if v := os.Getenv("OUTBOX_BENCH_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("OUTBOX_BENCH_EVENTS=%q is not a positive number", v)
		}
		return n
	}
	return 100_000
}

// drainMessages are n events on topic over 10,000 keys, 200-byte JSON.
func drainMessages(topic string, n int) []outbox.Message {
	payload := []byte(`{"order_id":42,"customer":"c-7","status":"PAID","pad":"` + strings.Repeat("x", 140) + `"}`)
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: topic, Key: fmt.Sprintf("order-%d", i%10000), Type: "OrderPaid", Payload: payload}
	}
	return msgs
}

// drain enqueues msgs in a fresh PostgreSQL table, then times relay.Run
// through br until the table is empty, and returns events per second.
func drain(b *testing.B, br broker.Broker, msgs []outbox.Message) float64 {
	b.Helper()
	st := teststores.Open(b, "postgres", store.Options{}).Store
	ctx := context.Background()
	var err error
	for i := 0; i < len(msgs); i += 1000 {
		if err = st.Enqueue(ctx, msgs[i:min(i+1000, len(msgs))]...); err != nil {
			b.Fatal(err)
		}
	}
	cfg := relay.Config{PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if v := os.Getenv("OUTBOX_BENCH_WORKERS"); v != "" { // to see whether the relay's pipeline or the machine is the limit
		if cfg.Workers, err = strconv.Atoi(v); err != nil {
			b.Fatalf("OUTBOX_BENCH_WORKERS=%q: %v", v, err)
		}
	}
	r, err := relay.New(st, br, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	for {
		time.Sleep(20 * time.Millisecond)
		stats, err := st.Stats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if stats.Dead > 0 {
			b.Fatalf("%d events went DEAD", stats.Dead)
		}
		if stats.Pending() == 0 {
			break
		}
		if time.Since(start) > 10*time.Minute {
			b.Fatalf("not drained after 10 minutes: %+v", stats)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return float64(len(msgs)) / elapsed.Seconds()
}

// memDrain is drain into an in-memory broker: the relay's and PostgreSQL's
// ceiling, measured in the same run.
func memDrain(b *testing.B, msgs []outbox.Message) float64 {
	b.Helper()
	mb, err := membroker.New(membroker.Config{})
	if err != nil {
		b.Fatal(err)
	}
	return drain(b, mb, msgs)
}
