package telemetry_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/dashboard"
	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/telemetry"
	"github.com/outbox-go/outbox/testkit/teststores"
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
// NATS JetStream (the machine's servers), and the CPU its process spends
// per event, with its metrics, tracing and dashboard off and on, in rounds
// of the same run (every variant's table filled first, then drained one
// after the other, the order rotated each round, after a warm-up round
// that is not counted), so that every variant sees the same machine:
//
//	go test -run XXX -bench TelemetryOverhead/all -benchtime 1x ./telemetry/
//	go test -run XXX -bench TelemetryOverhead/traced -benchtime 1x ./telemetry/
//
//	go test -run XXX -bench TelemetryOverhead/mem -benchtime 1x ./telemetry/
//
// OUTBOX_BENCH_EVENTS (default 20,000; 500,000 for mem) and
// OUTBOX_BENCH_ROUNDS (5, 10 and 20) set the drain size and the rounds:
// longer drains resolve smaller differences on a quiet machine. "mem" runs
// the relay alone (an in-memory store and membroker in this process), the
// worst case for the hooks' share, and the steadiest rate.
//
// "all-on" is what `outbox relay --metrics-addr … --otlp-endpoint …
// --dashboard-addr …` runs: Metrics, State scraped every second, Tracing
// (its default, a span per publish call) with the SDK's batch processor
// into an exporter that drops the spans, and the dashboard sampling at its
// default rate with a client reading its overview and dead letters every
// 500 ms (four open pages). "off" and "all-on" drain events enqueued
// without a trace context (producers that do not trace); the "-traced"
// variants drain events that each carry a sampled traceparent of a
// producer span of their own (every producer traced, 100 % sampled), the
// worst case: "off-traced" with no hook, "all-on-traced" with everything
// on, "on-traced-event" with metrics and TracingConfig.PerEvent (a recorded
// span per event, no dashboard). "all" runs the five; "traced" only
// off-traced and all-on-traced, in more rounds. The
// overheads are the medians of each round's on/off ratio; the rates and
// CPU figures the medians of the rounds; "hooks-µs/ev" is the CPU spent
// inside the metrics and tracing hooks per event (the thread's CPU clock
// around each call), and "hooks-share-%" that against the relay's CPU per
// event in the same round's off variant.
func BenchmarkTelemetryOverhead(b *testing.B) {
	b.Run("all", func(b *testing.B) {
		overhead(b, envInt("OUTBOX_BENCH_EVENTS", 20_000), envInt("OUTBOX_BENCH_ROUNDS", 5), []string{"off", "all-on", "off-traced", "all-on-traced", "on-traced-event"},
			[][2]string{{"off", "all-on"}, {"off-traced", "all-on-traced"}, {"off-traced", "on-traced-event"}})
	})
	b.Run("traced", func(b *testing.B) {
		overhead(b, envInt("OUTBOX_BENCH_EVENTS", 20_000), envInt("OUTBOX_BENCH_ROUNDS", 10), []string{"off-traced", "all-on-traced"}, [][2]string{{"off-traced", "all-on-traced"}})
	})
	// The relay alone: an in-memory store (memStore) and membroker, so the
	// relay's own work is all there is and the hooks' share of it the
	// largest it can be; no other process shares the drain, which makes
	// the rate steady enough to resolve a few per cent.
	b.Run("mem", func(b *testing.B) {
		memBench = true
		defer func() { memBench = false }()
		overhead(b, envInt("OUTBOX_BENCH_EVENTS", 500_000), envInt("OUTBOX_BENCH_ROUNDS", 20), []string{"off", "all-on", "off-traced", "all-on-traced"},
			[][2]string{{"off", "all-on"}, {"off-traced", "all-on-traced"}})
	})
}

// memBench makes overhead drain memStores into membroker instead of
// PostgreSQL tables into NATS JetStream (the "mem" sub-benchmark).
var memBench bool

// envInt is the positive integer in the environment variable name, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func overhead(b *testing.B, events, rounds int, variants []string, pairs [][2]string) {
	topic := func(string) string { return "bench.mem" }
	tables := map[string]driver.Store{} // a table per variant: a drain leaves it empty
	for _, v := range variants {
		tables[v] = &memStore{}
	}
	if !memBench {
		stream := testnats.NewStream(b, testnats.Shared(b))
		topic = stream.Topic
		for _, v := range variants {
			tables[v] = teststores.Open(b, "postgres", store.Options{}).Store
		}
	}
	for i := 0; i < b.N; i++ {
		rates, cpus, inHooks := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
		rateOver, cpuOver, hookShare := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
		for round := -1; round < rounds; round++ {
			rate, cpu, hooks := map[string]float64{}, map[string]float64{}, map[string]float64{}
			// fill every variant's table first, so that the drains of a
			// round follow each other within seconds
			order := make([]string, len(variants))
			for j := range variants {
				order[j] = variants[(j+max(round, 0))%len(variants)]
				fill(b, tables[order[j]], order[j], topic(fmt.Sprintf("r%d%s", round+1, order[j])), events)
			}
			for _, v := range order {
				rate[v], cpu[v], hooks[v] = drainOnce(b, tables[v], v, events)
				b.Logf("round %d %-15s %8.0f ev/s %6.2f µs CPU/event %5.3f µs CPU in hooks/event", round, v, rate[v], cpu[v], hooks[v])
			}
			if round < 0 {
				continue
			}
			for _, v := range variants {
				rates[v] = append(rates[v], rate[v])
				cpus[v] = append(cpus[v], cpu[v])
				inHooks[v] = append(inHooks[v], hooks[v])
			}
			for _, p := range pairs {
				rateOver[p[1]] = append(rateOver[p[1]], 100*(rate[p[0]]-rate[p[1]])/rate[p[0]])
				cpuOver[p[1]] = append(cpuOver[p[1]], 100*(cpu[p[1]]-cpu[p[0]])/cpu[p[0]])
				hookShare[p[1]] = append(hookShare[p[1]], 100*hooks[p[1]]/cpu[p[0]])
			}
		}
		for _, v := range variants {
			b.ReportMetric(median(rates[v]), v+"-ev/s")
			b.ReportMetric(median(cpus[v]), v+"-µs-cpu/ev")
			if strings.Contains(v, "on") {
				b.ReportMetric(median(inHooks[v]), v+"-hooks-µs/ev")
			}
		}
		for _, p := range pairs {
			b.ReportMetric(median(rateOver[p[1]]), p[1]+"-rate-overhead-%")
			b.ReportMetric(median(cpuOver[p[1]]), p[1]+"-cpu-overhead-%")
			b.ReportMetric(median(hookShare[p[1]]), p[1]+"-hooks-share-%")
			b.Logf("%-15s vs %-10s: rate overhead per round %v, CPU overhead per round %v, hooks' CPU share per round %v", p[1], p[0], rounded(rateOver[p[1]]), rounded(cpuOver[p[1]]), rounded(hookShare[p[1]]))
		}
	}
}

func rounded(xs []float64) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%+.1f%%", x)
	}
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// fill enqueues n events on topic into st, each with a traceparent of a
// sampled producer span of its own for a "-traced" variant.
func fill(b *testing.B, st driver.Store, variant, topic string, n int) {
	b.Helper()
	ctx := context.Background()
	traced := strings.Contains(variant, "-traced")
	tp := sdktrace.NewTracerProvider() // no processor: the producers' spans go nowhere
	defer tp.Shutdown(ctx)
	msgs := make([]outbox.Message, 0, 1000)
	for i := 0; i < n; i++ {
		m := outbox.Message{Topic: topic, Key: fmt.Sprintf("k%d", i%5000), Type: "OrderPaid",
			Payload: []byte(`{"order":"0000000000","amount":1999,"currency":"EUR","customer":"c-0000000000","lines":[{"sku":"sku-1","qty":1}]}`)}
		if traced {
			pctx, s := tp.Tracer("producer").Start(ctx, "produce")
			s.End()
			m = telemetry.WithTrace(pctx, m)
		}
		msgs = append(msgs, m)
		if len(msgs) == cap(msgs) || i == n-1 {
			if err := st.Enqueue(ctx, msgs...); err != nil {
				b.Fatal(err)
			}
			msgs = msgs[:0]
		}
	}
}

// drainOnce drains the n events fill put in st; it returns the drain rate
// and the CPU this process (the relay: PostgreSQL and NATS run in their
// own) spent per event meanwhile, in µs, which another process's load on
// the machine moves less than the rate.
func drainOnce(b *testing.B, st driver.Store, variant string, n int) (rate, cpuPerEvent, hooksPerEvent float64) {
	b.Helper()
	ctx := context.Background()
	var tp *sdktrace.TracerProvider
	hooksOn := strings.Contains(variant, "on")
	withDashboard := strings.HasPrefix(variant, "all-on")
	if hooksOn {
		tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
		defer tp.Shutdown(ctx)
	}
	done := &settled{}
	hooks := []relay.Hook{done}
	var reg *prometheus.Registry
	th := &timed{}
	if hooksOn {
		th.m = telemetry.NewMetrics(telemetry.MetricsConfig{})
		th.t = telemetry.NewTracing(telemetry.TracingConfig{TracerProvider: tp, System: "nats", PerEvent: strings.HasSuffix(variant, "-event")})
		hooks = append(hooks, th)
		reg = prometheus.NewRegistry()
		reg.MustRegister(th.m)
	}
	var br broker.Broker
	var err error
	if memBench {
		br, err = membroker.New(membroker.Config{})
	} else {
		br, err = natsbroker.Dial(testnats.Shared(b), natsbroker.Config{})
	}
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
	stopPages := func() {}
	if withDashboard {
		stopPages = servePages(b, st, r)
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
	stopPages()
	return float64(n) / took.Seconds(), float64(cpu.Microseconds()) / float64(n), float64(th.ns.Load()) / 1e3 / float64(n)
}

// timed passes the relay's hook calls on to the metrics and tracing hooks
// and adds up the time spent in them.
type timed struct {
	m  *telemetry.Metrics
	t  *telemetry.Tracing
	ns atomic.Int64
}

// start pins the calling goroutine to its thread and returns the thread's
// CPU time so far; stop adds what the thread spent since: the hooks' CPU,
// GC assists included, which the machine's load does not inflate as it
// does a wall time (a preempted hook waits, but spends nothing).
func (h *timed) start() int64 {
	runtime.LockOSThread()
	return threadCPU()
}

func (h *timed) stop(t0 int64) {
	h.ns.Add(threadCPU() - t0)
	runtime.UnlockOSThread()
}

// threadCPU is the CPU time of the calling thread, in ns.
func threadCPU() int64 {
	var ts syscall.Timespec
	const clockThreadCPUTimeID = 3 // CLOCK_THREAD_CPUTIME_ID
	_, _, _ = syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

func (h *timed) OnClaim(ctx context.Context, c relay.ClaimInfo) {
	t0 := h.start()
	h.m.OnClaim(ctx, c)
	h.stop(t0)
}

func (h *timed) OnPublishStart(ctx context.Context, events []outbox.Event) context.Context {
	t0 := h.start()
	ctx = h.t.OnPublishStart(ctx, events)
	h.stop(t0)
	return ctx
}

func (h *timed) OnPublishEnd(ctx context.Context, p relay.PublishInfo) {
	t0 := h.start()
	h.m.OnPublishEnd(ctx, p)
	h.t.OnPublishEnd(ctx, p)
	h.stop(t0)
}

func (h *timed) OnSettle(ctx context.Context, r relay.BatchReport) {
	t0 := h.start()
	h.m.OnSettle(ctx, r)
	h.stop(t0)
}

// servePages serves r's dashboard over HTTP on loopback, with a client that
// reads what four open pages read (the overview and a page of dead letters
// every 2 s each, so every 500 ms), until the returned stop.
func servePages(b *testing.B, st driver.Store, r *relay.Relay) (stop func()) {
	b.Helper()
	d, err := dashboard.New(dashboard.Config{Store: st, Relay: r, Token: "bench-token-0123456789", Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(d)
	quit, clientDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(clientDone)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			for _, p := range []string{"/api/overview", "/api/dead?limit=25"} {
				resp, err := http.Get(srv.URL + p)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("dashboard %s: %s", p, resp.Status)
				}
			}
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(quit)
		<-clientDone
		srv.Close()
		_ = d.Close()
	}
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

// BenchmarkDashboardAndScrapeCPU is what the dashboard (sampling at its
// default rate, four open pages polling it) and a metrics scrape a second
// cost the relay's process per second, fixed costs that do not grow with
// the events: an idle relay over an empty PostgreSQL table with both on,
// against the same relay with both off, 5 s each, alternated 3 times:
//
//	go test -run XXX -bench DashboardAndScrapeCPU -benchtime 1x -v ./telemetry/
//
// Divided by a drain rate, it is their cost per event.
func BenchmarkDashboardAndScrapeCPU(b *testing.B) {
	st := teststores.Open(b, "postgres", store.Options{}).Store
	br, err := natsbroker.Dial(testnats.Shared(b), natsbroker.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close(context.Background())
	metrics := telemetry.NewMetrics(telemetry.MetricsConfig{})
	r, err := relay.New(st, br, relay.Config{BatchSize: 1000, Hooks: []relay.Hook{metrics}, Logger: quiet(), PollInterval: 20 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics, telemetry.NewState(r, st))
	rctx, stop := context.WithCancel(context.Background())
	finished := make(chan struct{})
	go func() { defer close(finished); _ = r.Run(rctx) }()
	defer func() { stop(); <-finished }()
	const window = 5 * time.Second
	measure := func(on bool) float64 {
		stopPages := func() {}
		if on {
			stopPages = servePages(b, st, r)
		}
		start, cpu0 := time.Now(), processCPU(b)
		for time.Since(start) < window {
			time.Sleep(time.Second)
			if on {
				if _, err := reg.Gather(); err != nil {
					b.Fatal(err)
				}
			}
		}
		cpu, took := processCPU(b)-cpu0, time.Since(start)
		stopPages()
		return float64(cpu.Microseconds()) / took.Seconds() / 1e3 // ms of CPU per second
	}
	for i := 0; i < b.N; i++ {
		var diffs []float64
		for round := range 3 {
			off, on := measure(false), measure(true)
			b.Logf("round %d: off %.2f ms CPU/s, on %.2f ms CPU/s", round, off, on)
			diffs = append(diffs, on-off)
		}
		b.ReportMetric(median(diffs), "ms-cpu/s")
	}
}
