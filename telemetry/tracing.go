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
	// PerEvent publishes each sampled event in a span of its own, a child
	// of the producer's span, so that the producer's trace shows its
	// publish; it costs the OpenTelemetry SDK a recorded span per event
	// (2–4 µs of CPU, about half of what the relay spends on an event;
	// BENCHMARKS.md, "The overhead of metrics, tracing and the dashboard").
	// Default false: one span per wave (one publish call, up to a batch),
	// the root of a trace of its own, linked to the
	// traces of the wave's sampled events (up to 128, the SDK's default
	// link limit; the rest are counted in outbox.batch.unlinked), with
	// messaging.batch.message_count and the number that failed
	// (outbox.batch.failed), as OpenTelemetry's messaging conventions
	// describe batch publishing. Either way the event's traceparent reaches
	// the broker unchanged, so the consumer links to the producer's trace.
	PerEvent bool
}

// Tracing records the relay's publishing in the events' traces: by
// default one span per publish call linked to the traces of its events,
// with TracingConfig.PerEvent a span per event, a child of the span that
// enqueued it (the traceparent header stored with the event); both with the
// messaging attributes of OpenTelemetry's semantic conventions and what the
// broker answered. Pass it in relay.Config.Hooks. The event's traceparent
// travels to the broker unchanged, among its headers, so the consumer's
// span can link to the producer's trace.
type Tracing struct {
	tracer   trace.Tracer
	system   attribute.KeyValue
	hasSys   bool
	untraced bool
	perEvent bool
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
		perEvent: c.PerEvent,
	}
	if c.System != "" {
		t.system, t.hasSys = semconv.MessagingSystemKey.String(c.System), true
	}
	return t
}

// spansKey finds a wave's spans in the publish context (per event), and
// waveKey its one span (the default).
type (
	spansKey struct{}
	waveKey  struct{}
)

// OnPublishStart implements relay.HookPublishStart: by default one span for
// the wave (startWave); with PerEvent one span per event whose stored trace
// context is sampled (an unsampled producer's trace is not recorded, so a
// span under it would be thrown away), kept in the returned context until
// OnPublishEnd ends them.
func (t *Tracing) OnPublishStart(ctx context.Context, events []outbox.Event) context.Context {
	if !t.perEvent {
		return t.startWave(ctx, events)
	}
	var (
		spans    []trace.Span
		topic    string
		spanName string
		bg       = context.Background()
	)
	for i := range events {
		e := &events[i]
		parent, ok := t.parent(bg, e.Headers)
		if !ok {
			continue
		}
		if spans == nil {
			spans = make([]trace.Span, len(events))
		}
		if e.Topic != topic || spanName == "" {
			topic, spanName = e.Topic, "publish "+e.Topic
		}
		// The attributes are set in OnPublishEnd, with the broker's answer,
		// in one call: the SDK grows a span's attribute slice per call.
		_, spans[i] = t.tracer.Start(parent, spanName, producerKind)
	}
	if spans == nil {
		return ctx
	}
	return context.WithValue(ctx, spansKey{}, spans)
}

// producerKind is the publish spans' kind.
var producerKind = trace.WithSpanKind(trace.SpanKindProducer)

// parent is the context in which an event with headers h gets its publish
// span (PerEvent): the producer's, read from its traceparent; bg for an
// event without a usable one when Untraced is set; ok is false when the
// event gets no span.
func (t *Tracing) parent(bg context.Context, h map[string]string) (ctx context.Context, ok bool) {
	tp := headerCarrier(h).Get(TraceParentHeader)
	if tp != "" {
		if unsampled(tp) {
			return nil, false // the cheap way out
		}
		if headerCarrier(h).Get(TraceStateHeader) == "" {
			// the common case, read without the propagator's allocations
			if sc, ok := parseTraceParent(tp); ok {
				return trace.ContextWithRemoteSpanContext(bg, sc), sc.IsSampled()
			}
		}
		parent := traceContext.Extract(bg, headerCarrier(h))
		if sc := trace.SpanContextFromContext(parent); sc.IsValid() {
			return parent, sc.IsSampled()
		}
	}
	return bg, t.untraced
}

// OnPublishEnd implements relay.HookPublishEnd: each span gets its event's
// attributes and what the broker answered for it, and ends.
func (t *Tracing) OnPublishEnd(ctx context.Context, p relay.PublishInfo) {
	if span, ok := ctx.Value(waveKey{}).(trace.Span); ok {
		endWave(span, p)
		return
	}
	spans, _ := ctx.Value(spansKey{}).([]trace.Span)
	var attrs []attribute.KeyValue // reused: SetAttributes copies them
	for i, span := range spans {
		if span == nil {
			continue
		}
		if !span.IsRecording() {
			span.End()
			continue
		}
		if attrs == nil {
			attrs = make([]attribute.KeyValue, 0, 11)
		}
		attrs = attrs[:0]
		if t.hasSys {
			attrs = append(attrs, t.system)
		}
		attrs = append(attrs, semconv.MessagingOperationTypeSend)
		if i < len(p.Events) {
			e := &p.Events[i]
			attrs = append(attrs,
				semconv.MessagingDestinationName(e.Topic),
				semconv.MessagingMessageID(e.EventID),
				semconv.CloudEventsEventType(e.Type),
				attribute.Int("outbox.event.attempt", e.Attempts+1),
			)
		}
		if i >= len(p.Results) {
			span.SetAttributes(attrs...)
			span.SetStatus(codes.Error, "the broker returned no result")
			span.End()
			continue
		}
		r := &p.Results[i]
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
		span.SetAttributes(attrs...)
		span.End()
	}
}

// maxWaveLinks bounds a wave span's links: the SDK's default limit, past
// which it evicts one link per link added (a copy of the whole queue each
// time).
const maxWaveLinks = 128

// startWave is OnPublishStart without PerEvent: one span, linked to the
// first maxWaveLinks of the events' sampled traces (a run of events with
// the same traceparent, a producer that enqueued them in one span, gets one
// link); the rest are counted in outbox.batch.unlinked (runs once, the
// traceparent's form checked but not its hex).
func (t *Tracing) startWave(ctx context.Context, events []outbox.Event) context.Context {
	var links []trace.Link
	unlinked := 0
	last := "" // the traceparent of the last link
	for i := range events {
		tp := headerCarrier(events[i].Headers).Get(TraceParentHeader)
		if tp == "" || tp == last || unsampled(tp) {
			continue
		}
		if len(links) == maxWaveLinks {
			// past the limit only counted: decoding the hex of a
			// traceparent that no link will carry is the wave's main cost
			if len(tp) == 55 && tp[:3] == "00-" && tp[35] == '-' && tp[52] == '-' {
				unlinked++
				last = tp
			}
			continue
		}
		sc, ok := parseTraceParent(tp)
		if !ok { // another version, or malformed: the propagator decides
			sc = trace.SpanContextFromContext(traceContext.Extract(context.Background(), headerCarrier(events[i].Headers)))
		}
		if sc.IsValid() && sc.IsSampled() {
			if links == nil {
				links = make([]trace.Link, 0, min(len(events)-i, maxWaveLinks))
			}
			links = append(links, trace.Link{SpanContext: sc})
			last = tp
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
	_, span := t.tracer.Start(context.Background(), name, producerKind,
		trace.WithNewRoot(), trace.WithLinks(links...), trace.WithAttributes(attrs...))
	return context.WithValue(ctx, waveKey{}, span)
}

// endWave ends a wave span with how many events failed and the first
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

// parseTraceParent reads a version-00 traceparent without allocating; ok
// is false for anything else, as for the W3C propagator (a version-00
// header with reserved flag bits set is refused).
func parseTraceParent(v string) (trace.SpanContext, bool) {
	if len(v) != 55 || v[:3] != "00-" || v[35] != '-' || v[52] != '-' {
		return trace.SpanContext{}, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	var flags [1]byte
	// Version 00 has no reserved flag bits set (the propagator refuses
	// those); it keeps the sampled and random bits.
	if !hexInto(tid[:], v[3:35]) || !hexInto(sid[:], v[36:52]) || !hexInto(flags[:], v[53:55]) || flags[0] > 3 {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]) & (trace.FlagsSampled | trace.FlagsRandom), Remote: true})
	return sc, sc.IsValid()
}

// hexInto decodes lower-case hex s into dst (len(s) == 2·len(dst)), as
// W3C Trace Context requires it.
func hexInto(dst []byte, s string) bool {
	bad := byte(0)
	for i := range dst {
		hi, lo := unhex[s[2*i]], unhex[s[2*i+1]]
		bad |= hi | lo
		dst[i] = hi<<4 | lo&0x0f
	}
	return bad&0x10 == 0
}

// unhex is the value of a lower-case hex digit, 0x10 for any other byte.
var unhex = func() (t [256]byte) {
	for i := range t {
		t[i] = 0x10
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c-'a') + 10
	}
	return t
}()

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
