package telemetry_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/internal/teststores"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/telemetry"
)

// discard is a span exporter that drops what it is given: the SDK's whole
// cost (sampling, recording, the batch processor) without a collector's.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// settled counts delivered events; every variant has it, hooks off too.
type settled struct{ n atomic.Int64 }

func (s *settled) OnSettle(_ context.Context, r relay.BatchReport) { s.n.Add(int64(r.Delivered)) }

// BenchmarkTelemetryOverhead is the drain rate of a relay, PostgreSQL →
// NATS JetStream (the machine's servers), with its metrics and tracing
// hooks off and on, in rounds of the same run (the order rotated each
// round, after a warm-up round that is not counted), so that every
// variant sees the same machine:
//
//	go test -run XXX -bench TelemetryOverhead -benchtime 1x ./telemetry/
//
// "on" is what `outbox relay --metrics-addr … --otlp-endpoint …` runs:
// Metrics and State scraped every second, Tracing with the SDK's batch
// processor (its default queue) into an exporter that drops the spans.
// "off" and "on" drain events enqueued without a trace context (producers
// that do not trace); "off-traced" and "on-traced" drain events that each
// carry a sampled traceparent (every producer traced, 100 % sampled: a
// recorded span per event), the worst case; "on-traced-wave" is that with
// TracingConfig.PerWave (one span per publish call, linked to the events'
// traces).
func BenchmarkTelemetryOverhead(b *testing.B) {
	const events = 50_000
	const rounds = 5
	url := testnats.Shared(b)
	stream := testnats.NewStream(b, url)
	st := teststores.Open(b, "postgres", store.Options{}).Store // one table: a drain leaves it empty
	variants := []string{"off", "on", "off-traced", "on-traced", "on-traced-wave"}
	for i := 0; i < b.N; i++ {
		rates, cpus := map[string][]float64{}, map[string][]float64{}
		for round := -1; round < rounds; round++ {
			for j := range variants {
				v := variants[(j+max(round, 0))%len(variants)]
				rate, cpu := drainOnce(b, st, v, stream.Topic(fmt.Sprintf("r%d%s", round+1, v)), events)
				b.Logf("round %d %-10s %8.0f ev/s %6.2f µs CPU/event", round, v, rate, cpu)
				if round >= 0 {
					rates[v] = append(rates[v], rate)
					cpus[v] = append(cpus[v], cpu)
				}
			}
		}
		// medians: the machine is shared, and a round that another
		// process slowed should not count more than one that it did not
		for _, pair := range [][2]string{{"off", "on"}, {"off-traced", "on-traced"}, {"off-traced", "on-traced-wave"}} {
			off, on := median(rates[pair[0]]), median(rates[pair[1]])
			b.ReportMetric(off, pair[0]+"-ev/s")
			b.ReportMetric(on, pair[1]+"-ev/s")
			b.ReportMetric(100*(off-on)/off, pair[1]+"-rate-overhead-%")
			offCPU, onCPU := median(cpus[pair[0]]), median(cpus[pair[1]])
			b.ReportMetric(offCPU, pair[0]+"-µs-cpu/ev")
			b.ReportMetric(onCPU, pair[1]+"-µs-cpu/ev")
			b.ReportMetric(100*(onCPU-offCPU)/offCPU, pair[1]+"-cpu-overhead-%")
		}
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// drainOnce fills st with n events and drains them; it returns the drain
// rate and the CPU this process (the relay: PostgreSQL and NATS run in
// their own) spent per event meanwhile, in µs, which another process's
// load on the machine moves much less than the rate.
func drainOnce(b *testing.B, st store.Store, variant, topic string, n int) (rate, cpuPerEvent float64) {
	b.Helper()
	ctx := context.Background()
	var tracedCtx context.Context
	var tp *sdktrace.TracerProvider
	traced := strings.Contains(variant, "-traced")
	hooksOn := strings.HasPrefix(variant, "on")
	if traced || hooksOn {
		tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
		defer tp.Shutdown(ctx)
		c, s := tp.Tracer("producer").Start(ctx, "produce")
		defer s.End()
		tracedCtx = c
	}
	msgs := make([]outbox.Message, 0, 1000)
	for i := 0; i < n; i++ {
		m := outbox.Message{Topic: topic, Key: fmt.Sprintf("k%d", i%5000), Type: "OrderPaid",
			Payload: []byte(`{"order":"0000000000","amount":1999,"currency":"EUR","customer":"c-0000000000","lines":[{"sku":"sku-1","qty":1}]}`)}
		if traced {
			m = telemetry.WithTrace(tracedCtx, m)
		}
		msgs = append(msgs, m)
		if len(msgs) == cap(msgs) || i == n-1 {
			if err := st.Enqueue(ctx, msgs...); err != nil {
				b.Fatal(err)
			}
			msgs = msgs[:0]
		}
	}
	done := &settled{}
	hooks := []relay.Hook{done}
	var reg *prometheus.Registry
	if hooksOn {
		metrics := telemetry.NewMetrics()
		hooks = append(hooks, metrics, telemetry.NewTracing(telemetry.TracingConfig{TracerProvider: tp, System: "nats", PerEvent: !strings.HasSuffix(variant, "-wave")}))
		reg = prometheus.NewRegistry()
		reg.MustRegister(metrics)
	}
	br, err := natsbroker.Dial(testnats.Shared(b), natsbroker.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close(ctx)
	r, err := relay.New(st, br, relay.Config{BatchSize: 1000, Hooks: hooks, Logger: quiet(), PollInterval: 20 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	if reg != nil {
		reg.MustRegister(telemetry.NewState(r, st))
	}
	rctx, stop := context.WithCancel(ctx)
	finished := make(chan struct{})
	start, cpu0 := time.Now(), processCPU(b)
	go func() { defer close(finished); _ = r.Run(rctx) }()
	lastScrape := time.Now()
	for done.n.Load() < int64(n) {
		time.Sleep(2 * time.Millisecond)
		if reg != nil && time.Since(lastScrape) >= time.Second {
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
			lastScrape = time.Now()
		}
		if time.Since(start) > 5*time.Minute {
			b.Fatalf("%s: %d of %d delivered after 5 minutes", variant, done.n.Load(), n)
		}
	}
	took, cpu := time.Since(start), processCPU(b)-cpu0
	stop()
	<-finished
	return float64(n) / took.Seconds(), float64(cpu.Microseconds()) / float64(n)
}

// processCPU is the user and system CPU time this process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
