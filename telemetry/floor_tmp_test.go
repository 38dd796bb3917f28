package telemetry_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func BenchmarkSDKFloor(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("p").Start(context.Background(), "p")
	defer span.End()
	sc := trace.SpanContextFromContext(ctx)
	pctx := trace.ContextWithRemoteSpanContext(context.Background(), sc)
	tr := tp.Tracer("x")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_, s := tr.Start(pctx, "publish orders")
		s.End()
	}
}
