package telemetry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	outbox "github.com/outbox-go/outbox"

	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store/sqlitestore"
	"github.com/outbox-go/outbox/telemetry"
)

// Metrics and health endpoints for a relay: the metrics are a hook of the
// relay, the state reads its health and the store's backlog at scrape time.
func ExampleHandler() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	st, _ := sqlitestore.Open(ctx, "sqlite:"+filepath.Join(dir, "app.db"), sqlitestore.Config{})
	defer st.Close()
	_ = st.Migrate(ctx)
	br, _ := membroker.New(membroker.Config{}) // natsbroker.Dial(…) in production

	metrics := telemetry.NewMetrics(telemetry.MetricsConfig{})
	r, _ := relay.New(st, br, relay.Config{Hooks: []relay.Hook{metrics}})
	state := telemetry.NewState(r, st)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics, state)
	h, _ := telemetry.Handler(telemetry.HandlerConfig{Gatherer: reg, State: state})
	srv := httptest.NewServer(h) // http.ListenAndServe("127.0.0.1:9464", h) in production
	defer srv.Close()

	resp, _ := srv.Client().Get(srv.URL + "/readyz")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Print(resp.StatusCode, " ", string(body))
	// Output: 200 ready
}

// Tracing: the producer stores its trace context with the event
// (WithTrace); the relay's tracing hook publishes the event in a span linked
// to the producer's (one span per publish call; TracingConfig.PerEvent makes
// it a child span per event), and the broker message carries the producer's
// traceparent for the consumer.
func ExampleNewTracing() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	st, _ := sqlitestore.Open(ctx, "sqlite:"+filepath.Join(dir, "app.db"), sqlitestore.Config{})
	defer st.Close()
	_ = st.Migrate(ctx)
	br, _ := membroker.New(membroker.Config{})

	exp := tracetest.NewInMemoryExporter() // otlptracehttp.New(ctx) in production
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(ctx)

	// the producer, inside its own span
	pctx, span := tp.Tracer("shop").Start(ctx, "place order")
	_ = st.Enqueue(pctx, telemetry.WithTrace(pctx, outbox.Message{Topic: "orders", Key: "order-42", Type: "OrderPlaced", Payload: []byte(`{}`)}))
	span.End()

	// the relay
	tracing := telemetry.NewTracing(telemetry.TracingConfig{TracerProvider: tp, System: "nats"})
	r, _ := relay.New(st, br, relay.Config{Hooks: []relay.Hook{tracing}})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	for len(br.Events("orders")) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done

	for _, s := range exp.GetSpans() {
		if s.Name == "publish orders" {
			fmt.Println(s.Name, "linked to the producer's span:", len(s.Links) == 1 && s.Links[0].SpanContext.SpanID() == span.SpanContext().SpanID())
		}
	}
	fmt.Println("the producer's traceparent delivered:", br.Events("orders")[0].Headers["traceparent"] == telemetry.TraceHeaders(pctx)["traceparent"])
	// Output:
	// publish orders linked to the producer's span: true
	// the producer's traceparent delivered: true
}

// A producer that writes the outbox row with its own SQL stores the trace
// context in the headers column as JSON.
func ExampleTraceHeaders() {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("shop").Start(context.Background(), "place order")
	defer span.End()

	headers, _ := json.Marshal(telemetry.TraceHeaders(ctx))
	// INSERT INTO outbox (topic, event_key, event_type, payload, headers) VALUES ($1, $2, $3, $4, $5)
	fmt.Println(strings.HasPrefix(string(headers), `{"traceparent":"00-`+span.SpanContext().TraceID().String()))
	fmt.Println(telemetry.TraceHeaders(context.Background()) == nil) // no span: no headers
	// Output:
	// true
	// true
}
