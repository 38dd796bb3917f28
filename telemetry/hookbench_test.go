package telemetry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/telemetry"
)

// BenchmarkTracingHook is the tracing hook's own cost per event (one wave
// of 1,000), for events with a sampled traceparent, each from a producer
// span of its own (a span per event, and the default span per wave), with
// an unsampled one, with none, and sampled ones all from one producer span
// (a wave links it once):
//
//	go test -run XXX -bench TracingHook ./telemetry/
func BenchmarkTracingHook(b *testing.B) {
	for _, c := range []struct {
		name        string
		sampled     bool
		traced      bool
		perWave     bool
		oneProducer bool
	}{
		{"sampled-per-event", true, true, false, false}, {"unsampled", false, true, false, false}, {"untraced", false, false, false, false},
		{"sampled-per-wave", true, true, true, false}, {"sampled-per-wave-one-producer", true, true, true, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
			defer tp.Shutdown(context.Background())
			ctx, span := tp.Tracer("p").Start(context.Background(), "p")
			defer span.End()
			events := make([]outbox.Event, 1000)
			for i := range events {
				if !c.oneProducer {
					var s trace.Span
					ctx, s = tp.Tracer("p").Start(context.Background(), "p")
					s.End()
				}
				m := outbox.Message{Topic: "orders", EventID: outbox.NewEventID(), Type: "OrderPaid", Key: fmt.Sprint(i)}
				if c.traced {
					m = telemetry.WithTrace(ctx, m)
					if !c.sampled {
						tp := m.Headers["traceparent"]
						m.Headers["traceparent"] = tp[:len(tp)-2] + "00"
					}
				}
				events[i] = outbox.Event{ID: int64(i), Message: m}
			}
			results := make([]broker.Result, len(events))
			h := telemetry.NewTracing(telemetry.TracingConfig{TracerProvider: tp, System: "nats", PerEvent: !c.perWave})
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				wctx := h.OnPublishStart(context.Background(), events)
				h.OnPublishEnd(wctx, relay.PublishInfo{Events: events, Results: results})
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
		})
	}
}

// BenchmarkMetricsHook is the metrics hook's own cost per event: one claim,
// one publish and one settle of a batch of 1,000:
//
//	go test -run XXX -bench MetricsHook ./telemetry/
func BenchmarkMetricsHook(b *testing.B) {
	events := make([]outbox.Event, 1000)
	for i := range events {
		events[i] = outbox.Event{ID: int64(i), Message: outbox.Message{Topic: "orders", Type: "OrderPaid"}, CreatedAt: time.Now()}
	}
	results := make([]broker.Result, len(events))
	m := telemetry.NewMetrics(telemetry.MetricsConfig{})
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.OnClaim(ctx, relay.ClaimInfo{Events: events})
		m.OnPublishEnd(ctx, relay.PublishInfo{Events: events, Results: results})
		m.OnSettle(ctx, relay.BatchReport{Claimed: len(events), Delivered: len(events)})
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
}

// BenchmarkSDKSpan is the floor under a span per event: the OpenTelemetry
// SDK starting and ending one recorded span with no attributes, under a
// remote parent, into its batch processor (what the tracing hook cannot
// save):
//
//	go test -run XXX -bench SDKSpan ./telemetry/
func BenchmarkSDKSpan(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("p").Start(context.Background(), "p")
	span.End()
	parent := trace.ContextWithRemoteSpanContext(context.Background(), trace.SpanContextFromContext(ctx))
	tr := tp.Tracer("relay")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_, s := tr.Start(parent, "publish orders")
		s.End()
	}
}
