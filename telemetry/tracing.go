package telemetry

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/internal/redact"
	"github.com/outbox-go/outbox/relay"
)

// The W3C Trace Context header names under which an event carries the
// trace of the code that enqueued it. They are ordinary Message.Headers, so
// every broker adapter delivers them (the CloudEvents distributed tracing
// extension uses the same names), and a plain-SQL producer sets them in the
// headers column: {"traceparent": "00-…-…-01"}.
const (
	TraceParentHeader = "traceparent"
	TraceStateHeader  = "tracestate"
)

// traceContext is the one propagation format the outbox stores: W3C Trace
// Context, whatever the process's global propagator is, so that the stored
// headers mean the same to every relay and consumer.
var traceContext = propagation.TraceContext{}

// TraceHeaders returns the traceparent (and tracestate, when set) headers
// of the span in ctx, or nil when ctx carries no valid span context. For
// producers that build the headers column themselves.
func TraceHeaders(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	h := make(map[string]string, 2)
	traceContext.Inject(ctx, propagation.MapCarrier(h))
	return h
}

// WithTrace returns m with the W3C trace context of the span in ctx in its
// traceparent and tracestate headers, so that the relay continues that
// trace when it publishes the event and the consumer can link to it. m's
// own Headers map is not changed (a copy is made). Without a valid span
// context in ctx, m is returned as it is; a traceparent m already carries
// is replaced.
//
//	err := st.EnqueueTx(ctx, tx, telemetry.WithTrace(ctx, msg))
func WithTrace(ctx context.Context, m outbox.Message) outbox.Message {
	h := TraceHeaders(ctx)
	if h == nil {
		return m
	}
	out := make(map[string]string, len(m.Headers)+len(h))
	for k, v := range m.Headers {
		if !strings.EqualFold(k, TraceParentHeader) && !strings.EqualFold(k, TraceStateHeader) {
			out[k] = v
		}
	}
	maps.Copy(out, h)
	m.Headers = out
	return m
}

// TracingConfig configures NewTracing.
type TracingConfig struct {
	// TracerProvider makes the relay's tracer; default
	// otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// System is the messaging.system attribute: "kafka", "nats",
	// "rabbitmq", "redis", "mqtt", …; default: left out.
	System string
	// Untraced also starts a span, the root of a new trace, for events
	// enqueued without a trace context; default false: such events are
	// published without a span (a relay draining a backlog of them would
	// otherwise start a trace per event).
	Untraced bool
	// PerWave publishes each wave (one publish call, up to a batch) in one
	// span instead of one span per event: the span is the root of a trace
	// of its own, linked to the traces of the wave's sampled events (up to
	// 128, the SDK's default link limit; the rest are counted in
	// outbox.batch.unlinked), with messaging.batch.message_count and the
	// number that failed (outbox.batch.failed). The producers' traces then show no publish span of their own,
	// but cost the relay next to nothing (BENCHMARKS.md §6). Default false:
	// a span per sampled event.
	PerWave bool
}

// Tracing continues each event's trace in a publish span: a child of the
// span that enqueued it (the traceparent header stored with the event),
// with the messaging attributes of OpenTelemetry's semantic conventions and
// what the broker answered. Pass it in relay.Config.Hooks. The event's
// traceparent travels to the broker unchanged, among its headers, so the
// consumer's span can link to the producer's trace.
type Tracing struct {
	tracer   trace.Tracer
	system   attribute.KeyValue
	hasSys   bool
	untraced bool
	perWave  bool
}

var (
	_ relay.HookPublishStart = (*Tracing)(nil)
	_ relay.HookPublishEnd   = (*Tracing)(nil)
)

// NewTracing returns the tracing hook.
func NewTracing(c TracingConfig) *Tracing {
	tp := c.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	t := &Tracing{
		tracer:   tp.Tracer("github.com/outbox-go/outbox/relay", trace.WithSchemaURL(semconv.SchemaURL)),
		untraced: c.Untraced,
		perWave:  c.PerWave,
	}
	if c.System != "" {
		t.system, t.hasSys = semconv.MessagingSystemKey.String(c.System), true
	}
	return t
}

// spansKey finds a wave's spans in the publish context (per event), and
// waveKey its one span (PerWave).
type (
	spansKey struct{}
	waveKey  struct{}
)

// OnPublishStart implements relay.HookPublishStart: one span per event
// whose stored trace context is sampled (an unsampled producer's trace is
// not recorded, so a span under it would be thrown away), kept in the
// returned context until OnPublishEnd ends them.
func (t *Tracing) OnPublishStart(ctx context.Context, events []outbox.Event) context.Context {
	if t.perWave {
		return t.startWave(ctx, events)
	}
	var (
		spans     []trace.Span
		attrs     []attribute.KeyValue // reused: Start copies them
		topic     string
		spanName  string
		bg        = context.Background()
		spanKind  = trace.WithSpanKind(trace.SpanKindProducer)
		anyTraced = false
	)
	for i := range events {
		e := &events[i]
		var parent context.Context
		if tp := headerCarrier(e.Headers).Get(TraceParentHeader); tp != "" {
			if unsampled(tp) {
				continue // the cheap way out, before Extract allocates
			}
			parent = traceContext.Extract(bg, headerCarrier(e.Headers))
			if sc := trace.SpanContextFromContext(parent); !sc.IsValid() {
				parent = nil
			} else if !sc.IsSampled() {
				continue
			}
		}
		if parent == nil {
			if !t.untraced {
				continue
			}
			parent = bg
		}
		if !anyTraced {
			anyTraced = true
			spans = make([]trace.Span, len(events))
			attrs = make([]attribute.KeyValue, 0, 7)
		}
		if e.Topic != topic || spanName == "" {
			topic, spanName = e.Topic, "publish "+e.Topic
		}
		attrs = attrs[:0]
		if t.hasSys {
			attrs = append(attrs, t.system)
		}
		attrs = append(attrs,
			semconv.MessagingOperationTypeSend,
			semconv.MessagingDestinationName(e.Topic),
			semconv.MessagingMessageID(e.EventID),
			semconv.CloudEventsEventType(e.Type),
			attribute.Int("outbox.event.attempt", e.Attempts+1),
		)
		_, spans[i] = t.tracer.Start(parent, spanName, spanKind, trace.WithAttributes(attrs...))
	}
	if !anyTraced {
		return ctx
	}
	return context.WithValue(ctx, spansKey{}, spans)
}

// OnPublishEnd implements relay.HookPublishEnd: each span gets what the
// broker answered for its event, and ends.
func (t *Tracing) OnPublishEnd(ctx context.Context, p relay.PublishInfo) {
	if span, ok := ctx.Value(waveKey{}).(trace.Span); ok {
		endWave(span, p)
		return
	}
	spans, _ := ctx.Value(spansKey{}).([]trace.Span)
	var attrs []attribute.KeyValue
	for i, span := range spans {
		if span == nil {
			continue
		}
		if i >= len(p.Results) {
			span.SetStatus(codes.Error, "the broker returned no result")
			span.End()
			continue
		}
		r := &p.Results[i]
		if span.IsRecording() {
			attrs = attrs[:0] // one SetAttributes call: each grows the span's slice
			if r.Stream != "" {
				attrs = append(attrs, attribute.String("outbox.broker.stream", r.Stream))
			}
			if r.Sequence != 0 {
				attrs = append(attrs, attribute.Int64("outbox.broker.sequence", int64(r.Sequence)))
			}
			if r.Offset >= 0 {
				attrs = append(attrs, semconv.MessagingDestinationPartitionID(strconv.Itoa(int(r.Partition))), semconv.MessagingKafkaOffset(int(r.Offset)))
			}
			if r.Duplicate {
				attrs = append(attrs, attribute.Bool("outbox.broker.duplicate", true))
			}
			if r.Err != nil {
				attrs = append(attrs, semconv.ErrorTypeKey.String(errorKind(r.Err)))
				span.SetStatus(codes.Error, redact.Text(r.Err.Error()))
			}
			if len(attrs) > 0 {
				span.SetAttributes(attrs...)
			}
		}
		span.End()
	}
}

// maxWaveLinks bounds a PerWave span's links: the SDK's default limit, past
// which it evicts one link per link added (a copy of the whole queue each
// time).
const maxWaveLinks = 128

// startWave is OnPublishStart for PerWave: one span, linked to the first
// maxWaveLinks of the events' sampled traces; the rest are counted in
// outbox.batch.unlinked.
func (t *Tracing) startWave(ctx context.Context, events []outbox.Event) context.Context {
	var links []trace.Link
	unlinked := 0
	for i := range events {
		tp := headerCarrier(events[i].Headers).Get(TraceParentHeader)
		if tp == "" || unsampled(tp) {
			continue
		}
		sc, ok := parseTraceParent(tp)
		if !ok { // another version, or malformed: the propagator decides
			sc = trace.SpanContextFromContext(traceContext.Extract(context.Background(), headerCarrier(events[i].Headers)))
		}
		if sc.IsValid() && sc.IsSampled() {
			if len(links) == maxWaveLinks {
				unlinked++
				continue
			}
			if links == nil {
				links = make([]trace.Link, 0, min(len(events)-i, maxWaveLinks))
			}
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	if len(links) == 0 && !t.untraced {
		return ctx
	}
	name, topic := "publish", ""
	if len(events) > 0 {
		topic = events[0].Topic
		for i := range events {
			if events[i].Topic != topic {
				topic = ""
				break
			}
		}
	}
	attrs := make([]attribute.KeyValue, 0, 5)
	if t.hasSys {
		attrs = append(attrs, t.system)
	}
	attrs = append(attrs, semconv.MessagingOperationTypeSend, semconv.MessagingBatchMessageCount(len(events)))
	if unlinked > 0 {
		attrs = append(attrs, attribute.Int("outbox.batch.unlinked", unlinked))
	}
	if topic != "" {
		name = "publish " + topic
		attrs = append(attrs, semconv.MessagingDestinationName(topic))
	}
	_, span := t.tracer.Start(context.Background(), name, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithNewRoot(), trace.WithLinks(links...), trace.WithAttributes(attrs...))
	return context.WithValue(ctx, waveKey{}, span)
}

// endWave ends a PerWave span with how many events failed and the first
// failure.
func endWave(span trace.Span, p relay.PublishInfo) {
	failed := len(p.Events) - len(p.Results)
	var first error
	for i := range p.Results {
		if err := p.Results[i].Err; err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	if failed > 0 {
		span.SetAttributes(attribute.Int("outbox.batch.failed", failed))
		if first != nil {
			span.SetAttributes(semconv.ErrorTypeKey.String(errorKind(first)))
			span.SetStatus(codes.Error, redact.Text(first.Error()))
		} else {
			span.SetStatus(codes.Error, "the broker returned no result")
		}
	}
	span.End()
}

// parseTraceParent reads a version-00 traceparent without allocating (a
// link needs no tracestate); ok is false for anything else.
func parseTraceParent(v string) (trace.SpanContext, bool) {
	if len(v) != 55 || v[:3] != "00-" || v[35] != '-' || v[52] != '-' {
		return trace.SpanContext{}, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	var flags [1]byte
	if !hexInto(tid[:], v[3:35]) || !hexInto(sid[:], v[36:52]) || !hexInto(flags[:], v[53:55]) {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]), Remote: true})
	return sc, sc.IsValid()
}

// hexInto decodes lower-case hex s into dst (len(s) == 2·len(dst)), as
// W3C Trace Context requires it.
func hexInto(dst []byte, s string) bool {
	for i := range dst {
		hi, ok1 := unhex(s[2*i])
		lo, ok2 := unhex(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// unsampled reports whether traceparent is a version-00 value whose
// sampled flag is clear; anything else is left to the propagator.
func unsampled(traceparent string) bool {
	if len(traceparent) != 55 || traceparent[:3] != "00-" {
		return false
	}
	switch traceparent[54] {
	case '0', '2', '4', '6', '8', 'a', 'c', 'e': // the low bit of the flags byte
		return true
	}
	return false
}

// errorKind is the kind of a failed publish: the kind label of
// outbox_publish_failures_total and the error.type of its span.
func errorKind(err error) string {
	switch {
	case errors.Is(err, broker.ErrUnavailable):
		return "unavailable"
	case broker.IsPermanent(err):
		return "permanent"
	default:
		return "transient"
	}
}

// headerCarrier reads an event's headers for the propagator, ignoring the
// case of the names: a plain-SQL producer may have written Traceparent.
type headerCarrier map[string]string

func (h headerCarrier) Get(key string) string {
	if v, ok := h[key]; ok {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}

func (h headerCarrier) Set(string, string) {} // never written: events are read only here

func (h headerCarrier) Keys() []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}
