package binlog_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
)

// benchEvents is BINLOG_BENCH_EVENTS, or n.
func benchEvents(n int) int {
	if v, err := strconv.Atoi(os.Getenv("BINLOG_BENCH_EVENTS")); err == nil && v > 0 {
		return v
	}
	return n
}

// benchRelay runs the binlog source (binlog) or the polling relay (poll)
// on f's table through br until ctx ends; it returns the relay for its
// totals once it runs.
func benchRelay(ctx context.Context, b *testing.B, f *fixture, kind string, br broker.Broker) (*relay.Relay, func()) {
	b.Helper()
	cfg := relay.Config{BatchSize: 1000, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var r *relay.Relay
	var err error
	var closeSrc func()
	switch kind {
	case "binlog":
		c := f.cfg
		c.Logger = cfg.Logger
		src := f.start(b, c)
		closeSrc = func() { src.Close() }
		r, err = relay.NewSource(src, br, cfg)
	default:
		closeSrc = func() {}
		r, err = relay.New(f.store, br, cfg)
	}
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(runCtx) }()
	return r, func() { stop(); <-done; closeSrc() }
}

func memBroker(b *testing.B) broker.Broker {
	b.Helper()
	mb, err := membroker.New(membroker.Config{})
	if err != nil {
		b.Fatal(err)
	}
	return mb
}

// BenchmarkBinlogDrain: 100,000 events committed in 1,000 transactions of
// 100 before the relay starts; then the binlog source (first start: it
// reads them from the table, as after any fallback) or the polling relay
// delivers them through membroker. The binlog source is measured a second
// way too ("binlog-stream"): started first, so that the events come from
// the stream. Reported: the delivery rate, and the rate until every row
// is deleted.
//
//	go test -run XXX -bench BinlogDrain -benchtime 1x ./source/binlog/
func BenchmarkBinlogDrain(b *testing.B) {
	for _, kind := range []string{"binlog", "binlog-stream", "poll"} {
		b.Run(kind, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchDrain(b, kind, benchEvents(100_000))
			}
		})
	}
}

func benchDrain(b *testing.B, kind string, n int) {
	b.StopTimer()
	f := newFixture(b)
	ctx := context.Background()
	fill := func() {
		payload := strings.Repeat("x", 200)
		for i := 0; i < n; i += 100 {
			f.exec("INSERT INTO `"+f.cfg.Table+"` (topic, event_key, event_type, payload) SELECT 'bench', CONCAT('k', (seq + ?) % 5000), 'T', ? FROM seq_1_to_100", i, payload)
		}
	}
	var r *relay.Relay
	var stop func()
	var began time.Time
	if kind == "binlog-stream" {
		r, stop = benchRelay(ctx, b, f, "binlog", memBroker(b))
		b.StartTimer()
		began = time.Now()
		fill()
	} else {
		fill()
		b.StartTimer()
		began = time.Now()
		r, stop = benchRelay(ctx, b, f, strings.TrimSuffix(kind, "-stream"), memBroker(b))
	}
	defer stop()
	for r.Totals().Delivered.Load() < int64(n) {
		if time.Since(began) > 10*time.Minute {
			b.Fatalf("only %d of %d delivered", r.Totals().Delivered.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	drain := time.Since(began)
	for f.count("true") > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	settled := time.Since(began)
	b.StopTimer()
	b.ReportMetric(float64(n)/drain.Seconds(), "ev/s")
	b.ReportMetric(float64(n)/settled.Seconds(), "settled_ev/s")
	b.Logf("%s: %d events delivered in %s, every row deleted in %s", kind, n, drain.Round(time.Millisecond), settled.Round(time.Millisecond))
}

// confirmClock is membroker recording when each event was confirmed.
type confirmClock struct {
	broker.Broker
	mu sync.Mutex
	at map[string]time.Time
}

func (c *confirmClock) Publish(ctx context.Context, events []outbox.Event) []error {
	errs := c.Broker.Publish(ctx, events)
	now := time.Now()
	c.mu.Lock()
	for i, e := range events {
		if errs[i] == nil {
			if _, ok := c.at[e.EventID]; !ok {
				c.at[e.EventID] = now
			}
		}
	}
	c.mu.Unlock()
	return errs
}

// BenchmarkBinlogLatency: one event per transaction at 1,000 events/s for
// 10 s, through the binlog source and the polling relay; latency from the
// producer's COMMIT returning to the broker's confirmation (an event
// confirmed before its COMMIT returned counts 0). Reported: p50, p99, max.
//
//	go test -run XXX -bench BinlogLatency -benchtime 1x ./source/binlog/
func BenchmarkBinlogLatency(b *testing.B) {
	for _, kind := range []string{"binlog", "poll"} {
		b.Run(kind, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchLatency(b, kind, 1000, time.Duration(benchEvents(10_000))*time.Millisecond)
			}
		})
	}
}

func benchLatency(b *testing.B, kind string, rate int, d time.Duration) {
	b.StopTimer()
	f := newFixture(b)
	ctx := context.Background()
	clock := &confirmClock{Broker: memBroker(b), at: map[string]time.Time{}}
	_, stop := benchRelay(ctx, b, f, kind, clock)
	defer stop()
	committed := map[string]time.Time{}
	b.StartTimer()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		m := outbox.Message{EventID: outbox.NewEventID(), Topic: "bench", Key: fmt.Sprint("k", len(committed)%100), Type: "T", Payload: []byte("x")}
		if err := f.store.Enqueue(ctx, m); err != nil {
			b.Fatal(err)
		}
		committed[m.EventID] = time.Now()
	}
	waitUntil := time.Now().Add(time.Minute)
	for {
		clock.mu.Lock()
		n := len(clock.at)
		clock.mu.Unlock()
		if n >= len(committed) {
			break
		}
		if time.Now().After(waitUntil) {
			b.Fatalf("%d of %d events confirmed", n, len(committed))
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.StopTimer()
	lat := make([]time.Duration, 0, len(committed))
	clock.mu.Lock()
	for id, at := range committed {
		lat = append(lat, max(clock.at[id].Sub(at), 0))
	}
	clock.mu.Unlock()
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(int(p*float64(len(lat))), len(lat)-1)] }
	b.ReportMetric(float64(q(0.5).Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(q(0.99).Microseconds())/1000, "p99_ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max_ms")
	b.Logf("%s: %d events at %d/s: p50 %s, p99 %s, max %s", kind, len(lat), rate, q(0.5), q(0.99), lat[len(lat)-1])
}
