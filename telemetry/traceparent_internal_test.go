package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The fast path reads a traceparent as the W3C propagator does, flags
// included, and refuses what the propagator refuses.
func TestParseTraceParentMatchesThePropagator(t *testing.T) {
	for _, v := range []string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
		"00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
	} {
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": v}))
		got, ok := parseTraceParent(v)
		if ok != want.IsValid() {
			t.Errorf("%s: fast path ok=%v, propagator valid=%v", v, ok, want.IsValid())
			continue
		}
		if ok && !got.Equal(want) {
			t.Errorf("%s: fast path %v, propagator %v", v, got, want)
		}
	}
}
