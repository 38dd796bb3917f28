package telemetry_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/inbox/natsmsg"
	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/telemetry"
	"github.com/outbox-go/outbox/testkit/teststores"
)

func newTracer(t *testing.T) (*tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return exp, tp
}

// The producer's trace goes through the outbox, in both span modes: an
// event enqueued with WithTrace (and one a plain-SQL producer wrote with a
// traceparent in its headers column) reaches the real NATS JetStream with
// the producer's own traceparent, so the consumer's span, started from it,
// links to the producer's span, whatever the mode. What differs is the
// relay's span: with PerEvent a publish span per event, a child of the
// producer's span, with the messaging attributes; by default a span per publish call, the root of its own
// trace, linked to the producers' spans. An event enqueued without a trace
// gets no span and no link.
func TestTracingContinuesTheProducersTrace(t *testing.T) {
	natsURL := testnats.Shared(t)
	for _, mode := range []string{"event", "wave"} {
		for _, kind := range teststores.Kinds {
			t.Run(mode+"/"+kind, func(t *testing.T) {
				t.Parallel()
				testProducersTrace(t, natsURL, kind, mode == "event")
			})
		}
	}
}

func testProducersTrace(t *testing.T, natsURL, kind string, perEvent bool) {
	o := teststores.Open(t, kind, store.Options{})
	stream := testnats.NewStream(t, natsURL)
	topic := stream.Topic("orders")
	exp, tp := newTracer(t)
	tracer := tp.Tracer("shop")
	ctx := context.Background()

	// a Go producer, in its own span
	pctx, producer := tracer.Start(ctx, "place order")
	msg := telemetry.WithTrace(pctx, outbox.Message{Topic: topic, Key: "order-1", Type: "OrderPlaced", Payload: []byte(`{"id":1}`), Headers: map[string]string{"tenant": "acme"}})
	if err := o.Store.Enqueue(pctx, msg); err != nil {
		t.Fatal(err)
	}
	producer.End()
	// a plain-SQL producer, in a span of its own, writing the
	// header itself (as any language can)
	sqlctx, sqlProducer := tracer.Start(ctx, "plain SQL insert")
	tp1 := telemetry.TraceHeaders(sqlctx)[telemetry.TraceParentHeader]
	ph := func(n int) string {
		if kind == "postgres" {
			return fmt.Sprintf("$%d", n)
		}
		return "?"
	}
	insert := fmt.Sprintf("INSERT INTO %s (topic, event_key, event_type, payload, headers) VALUES (%s, %s, %s, %s, %s)", o.Opts.Table, ph(1), ph(2), ph(3), ph(4), ph(5))
	if _, err := o.DB.ExecContext(ctx, insert, topic, "order-2", "OrderPlaced", []byte(`{"id":2}`), `{"Traceparent": "`+tp1+`"}`); err != nil {
		t.Fatal(err)
	}
	sqlProducer.End()
	// and one with no trace at all
	if err := o.Store.Enqueue(ctx, outbox.Message{Topic: topic, Key: "order-3", Type: "OrderPlaced", Payload: []byte(`{"id":3}`)}); err != nil {
		t.Fatal(err)
	}

	br, err := natsbroker.Dial(natsURL, natsbroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { br.Close(context.Background()) })
	r, err := relay.New(o.Store, br, relay.Config{
		Hooks:  []relay.Hook{telemetry.NewTracing(telemetry.TracingConfig{TracerProvider: tp, System: "nats", PerEvent: perEvent})},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })

	var got []testnats.Message
	waitFor(t, "3 messages on the stream", 30*time.Second, func() bool {
		got, err = stream.All(ctx)
		return err == nil && len(got) == 3
	})
	// the consumer: reads the trace context from the message
	// (through inbox/natsmsg, as a handler would) and links its
	// span to it
	links := map[string]trace.SpanContext{}
	for _, m := range got {
		im, err := natsmsg.FromHeader(m.Subject, m.Headers, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		remote := propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": headerFold(im.Headers, "traceparent")})
		_, consumer := tracer.Start(ctx, "handle "+im.Key, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(trace.LinkFromContext(remote)))
		consumer.End()
		links[im.Key] = trace.SpanContextFromContext(remote)
		if im.Key == "order-1" && im.Headers["tenant"] != "acme" {
			t.Errorf("the producer's own header is lost: %v", im.Headers)
		}
	}
	producers := map[string]trace.SpanContext{"order-1": producer.SpanContext(), "order-2": sqlProducer.SpanContext()}
	for key, prod := range producers {
		// what the consumer gets, in either mode: the producer's span
		if links[key].TraceID() != prod.TraceID() || links[key].SpanID() != prod.SpanID() {
			t.Errorf("%s: the consumer's link is to %s/%s, not the producer's span %s/%s", key, links[key].TraceID(), links[key].SpanID(), prod.TraceID(), prod.SpanID())
		}
	}
	if links["order-3"].IsValid() {
		t.Errorf("an event enqueued without a trace arrived with one: %v", links["order-3"])
	}
	if !perEvent {
		checkWaveSpans(t, exp, topic, producers)
		return
	}
	waitFor(t, "the publish spans", 10*time.Second, func() bool { return len(spansNamed(exp, "publish "+topic)) >= 2 })
	for key, prod := range producers {
		var pub *tracetest.SpanStub
		for _, s := range spansNamed(exp, "publish "+topic) {
			if s.Parent.SpanID() == prod.SpanID() {
				pub = &s
			}
		}
		if pub == nil {
			t.Errorf("%s: no publish span is a child of the producer's span", key)
			continue
		}
		if pub.SpanKind != trace.SpanKindProducer || pub.SpanContext.TraceID() != prod.TraceID() || pub.Status.Code == codes.Error {
			t.Errorf("%s: publish span kind %v trace %s status %v", key, pub.SpanKind, pub.SpanContext.TraceID(), pub.Status)
		}
		attrs := attrMap(pub.Attributes)
		for k, want := range map[string]string{
			"messaging.system": "nats", "messaging.destination.name": topic, "messaging.operation.type": "send",
			"cloudevents.event_type": "OrderPlaced", "outbox.event.attempt": "1",
		} {
			if attrs[k] != want {
				t.Errorf("%s: publish span attribute %s = %q, want %q (all: %v)", key, k, attrs[k], want, attrs)
			}
		}
		if attrs["messaging.message.id"] == "" {
			t.Errorf("%s: publish span lacks the event id: %v", key, attrs)
		}
	}
	if n := len(spansNamed(exp, "publish "+topic)); n != 2 {
		t.Errorf("%d publish spans, want 2 (none for the untraced event)", n)
	}
}

// checkWaveSpans: the relay's spans (one per publish call, however the
// relay split the three events) are roots of their own traces, linked to
// each producer's span once, counting the events they published.
func checkWaveSpans(t *testing.T, exp *tracetest.InMemoryExporter, topic string, producers map[string]trace.SpanContext) {
	t.Helper()
	var waves []tracetest.SpanStub
	// The relay may publish the three events in one call or in several
	// (its dispatcher cuts a ready set in two); a call of untraced events
	// alone gets no span. So wait for the spans that link both producers.
	waitFor(t, "the wave spans of the 2 traced events", 10*time.Second, func() bool {
		waves = spansNamed(exp, "publish "+topic)
		seen := map[trace.SpanID]bool{}
		for _, s := range waves {
			for _, l := range s.Links {
				seen[l.SpanContext.SpanID()] = true
			}
		}
		for _, prod := range producers {
			if !seen[prod.SpanID()] {
				return false
			}
		}
		return true
	})
	n := 0
	for _, s := range waves {
		c, _ := strconv.Atoi(attrMap(s.Attributes)["messaging.batch.message_count"])
		n += c
	}
	if n < 2 || n > 3 {
		t.Errorf("the wave spans count %d events, want the 2 traced ones, and the untraced one if it went in the same call", n)
	}
	linked := map[trace.SpanID]int{}
	for _, s := range waves {
		if s.Parent.IsValid() || s.SpanKind != trace.SpanKindProducer || s.Status.Code == codes.Error {
			t.Errorf("wave span: parent %v kind %v status %v", s.Parent, s.SpanKind, s.Status)
		}
		if a := attrMap(s.Attributes); a["messaging.system"] != "nats" || a["messaging.destination.name"] != topic || a["messaging.operation.type"] != "send" {
			t.Errorf("wave span attributes: %v", a)
		}
		for _, l := range s.Links {
			linked[l.SpanContext.SpanID()]++
		}
	}
	for key, prod := range producers {
		if linked[prod.SpanID()] != 1 {
			t.Errorf("%s: the wave spans link %d times to the producer's span, want once", key, linked[prod.SpanID()])
		}
		for _, s := range exp.GetSpans() {
			if s.Parent.SpanID() == prod.SpanID() {
				t.Errorf("%s: span %q is a child of the producer's span; waves only link", key, s.Name)
			}
		}
	}
	if len(linked) != 2 {
		t.Errorf("the wave spans link to %d spans, want the 2 producers'", len(linked))
	}
}

// A failed publish marks its span as an error, with error.type and the
// broker's message; Untraced starts a root span for an event without a
// trace context; a confirmed one carries where the broker stored it.
func TestTracingRecordsFailures(t *testing.T) {
	exp, tp := newTracer(t)
	st := teststores.Open(t, "sqlite", store.Options{}).Store
	mb, err := membroker.New(membroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mb.SetDown(true)
	r, err := relay.New(st, mb, relay.Config{
		Hooks:  []relay.Hook{telemetry.NewTracing(telemetry.TracingConfig{TracerProvider: tp, Untraced: true, PerEvent: true})},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PollInterval: 20 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Enqueue(context.Background(), outbox.Message{Topic: "t", Type: "T", Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	defer func() { stop(); <-done }()
	waitFor(t, "a failed publish span", 10*time.Second, func() bool { return len(spansNamed(exp, "publish t")) > 0 })
	s := spansNamed(exp, "publish t")[0]
	if s.Status.Code != codes.Error || attrMap(s.Attributes)["error.type"] != "unavailable" || s.Parent.IsValid() {
		t.Errorf("failed publish span: status %v, attributes %v, parent %v", s.Status, s.Attributes, s.Parent)
	}
	if _, ok := attrMap(s.Attributes)["messaging.system"]; ok {
		t.Errorf("messaging.system set although System was empty")
	}
	mb.SetDown(false)
	var ok tracetest.SpanStub
	waitFor(t, "a successful publish span", 10*time.Second, func() bool {
		for _, s := range spansNamed(exp, "publish t") {
			if s.Status.Code != codes.Error {
				ok = s
				return true
			}
		}
		return false
	})
	if a := attrMap(ok.Attributes); a["outbox.broker.stream"] != "t" || a["outbox.broker.sequence"] != "1" || a["outbox.event.attempt"] != "1" {
		t.Errorf("confirmed publish span attributes: %v", a)
	}
}

// WithTrace copies the headers, replaces a stale traceparent whatever its
// case, and leaves a message alone when there is no span.
func TestWithTrace(t *testing.T) {
	_, tp := newTracer(t)
	m := outbox.Message{Topic: "t", Type: "T", Headers: map[string]string{"TraceParent": "00-stale", "tenant": "acme"}}
	if got := telemetry.WithTrace(context.Background(), m); got.Headers["TraceParent"] != "00-stale" || len(got.Headers) != 2 {
		t.Errorf("without a span: %v", got.Headers)
	}
	ctx, span := tp.Tracer("x").Start(context.Background(), "op")
	defer span.End()
	got := telemetry.WithTrace(ctx, m)
	want := fmt.Sprintf("00-%s-%s-01", span.SpanContext().TraceID(), span.SpanContext().SpanID())
	if got.Headers["traceparent"] != want || got.Headers["tenant"] != "acme" || len(got.Headers) != 2 {
		t.Errorf("WithTrace headers = %v, want traceparent %s and tenant", got.Headers, want)
	}
	if m.Headers["TraceParent"] != "00-stale" || len(m.Headers) != 2 {
		t.Errorf("WithTrace changed the caller's map: %v", m.Headers)
	}
	if err := outbox.Validate(outbox.Limits{}, got); err != nil {
		t.Errorf("a traced message does not validate: %v", err)
	}
}

func spansNamed(exp *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

func headerFold(h map[string]string, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// An event whose producer's trace was not sampled gets no span (it would
// be thrown away), and neither does one without a trace context; a
// sampled one does, named after its topic.
func TestTracingSpansOnlySampledTraces(t *testing.T) {
	exp, tp := newTracer(t)
	h := telemetry.NewTracing(telemetry.TracingConfig{TracerProvider: tp, PerEvent: true})
	ev := func(traceparent string) outbox.Event {
		m := outbox.Message{Topic: "orders", Type: "T", EventID: outbox.NewEventID()}
		if traceparent != "" {
			m.Headers = map[string]string{"traceparent": traceparent}
		}
		return outbox.Event{Message: m}
	}
	events := []outbox.Event{
		ev("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"), // not sampled
		ev(""),
		ev("not a traceparent"),
		ev("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
	}
	ctx := h.OnPublishStart(context.Background(), events)
	h.OnPublishEnd(ctx, relay.PublishInfo{Events: events, Results: make([]broker.Result, len(events))})
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "publish orders" || spans[0].Parent.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !spans[0].Parent.IsRemote() {
		t.Fatalf("spans = %+v, want one, under the sampled traceparent", spans)
	}
	if a := attrMap(spans[0].Attributes); a["messaging.message.id"] != events[3].EventID {
		t.Errorf("the span is not the sampled event's: %v", a)
	}
}

// No transport reserves the trace context headers: enqueue accepts them and
// every adapter delivers them as they are.
func TestTraceHeadersAreNotReserved(t *testing.T) {
	for _, tr := range []broker.Transport{"", broker.NATS, broker.Kafka, broker.AMQP, broker.HTTP} {
		for _, h := range []string{telemetry.TraceParentHeader, telemetry.TraceStateHeader} {
			if broker.IsReservedHeader(tr, h) || outbox.IsReservedHeader(h) {
				t.Errorf("%s is reserved for transport %q", h, tr)
			}
			if err := broker.CheckHeader(tr, h, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"); err != nil {
				t.Errorf("%s over %q: %v", h, tr, err)
			}
		}
	}
}

// The default: one span per publish call, a root of its own, linked to the
// traces of the wave's sampled events, with the count and the failures.
func TestTracingPerWave(t *testing.T) {
	exp, tp := newTracer(t)
	h := telemetry.NewTracing(telemetry.TracingConfig{TracerProvider: tp, System: "kafka"})
	tracer := tp.Tracer("shop")
	var producers []trace.SpanContext
	var events []outbox.Event
	for i := range 3 {
		ctx, s := tracer.Start(context.Background(), "produce")
		s.End()
		producers = append(producers, s.SpanContext())
		events = append(events, outbox.Event{ID: int64(i), Message: telemetry.WithTrace(ctx, outbox.Message{Topic: "orders", Type: "T"})})
	}
	events = append(events, outbox.Event{ID: 9, Message: outbox.Message{Topic: "orders", Type: "T"}}) // untraced
	results := make([]broker.Result, len(events))
	results[1].Err = broker.Permanentf("too large")
	ctx := h.OnPublishStart(context.Background(), events)
	h.OnPublishEnd(ctx, relay.PublishInfo{Events: events, Results: results})

	spans := spansNamed(exp, "publish orders")
	if len(spans) != 1 {
		t.Fatalf("%d wave spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Parent.IsValid() || len(s.Links) != 3 || s.Status.Code != codes.Error {
		t.Errorf("wave span: parent %v, %d links, status %v", s.Parent, len(s.Links), s.Status)
	}
	for i, l := range s.Links {
		if l.SpanContext.TraceID() != producers[i].TraceID() || l.SpanContext.SpanID() != producers[i].SpanID() {
			t.Errorf("link %d is to %v, not the producer's %v", i, l.SpanContext, producers[i])
		}
	}
	a := attrMap(s.Attributes)
	if a["messaging.batch.message_count"] != "4" || a["outbox.batch.failed"] != "1" || a["error.type"] != "permanent" || a["messaging.system"] != "kafka" || a["messaging.destination.name"] != "orders" {
		t.Errorf("wave span attributes: %v", a)
	}

	// a wave without a traced event has no span
	untraced := events[3:]
	ctx = h.OnPublishStart(context.Background(), untraced)
	h.OnPublishEnd(ctx, relay.PublishInfo{Events: untraced, Results: results[3:]})
	if n := len(exp.GetSpans()); n != 4 {
		t.Errorf("%d spans after an untraced wave, want the 4 from before", n)
	}
}

// A wave span links at most 128 producers' spans (the SDK's default limit)
// and counts the rest; a run of events enqueued in one producer span gets
// one link.
func TestTracingPerWaveBoundsItsLinks(t *testing.T) {
	exp, tp := newTracer(t)
	h := telemetry.NewTracing(telemetry.TracingConfig{TracerProvider: tp})
	var events []outbox.Event
	for i := range 200 {
		ctx, s := tp.Tracer("shop").Start(context.Background(), "produce")
		s.End()
		for range 1 + i%2 { // every other producer enqueued two events
			events = append(events, outbox.Event{ID: int64(len(events)), Message: telemetry.WithTrace(ctx, outbox.Message{Topic: fmt.Sprint("t", len(events)%2), Type: "T"})})
		}
	}
	wctx := h.OnPublishStart(context.Background(), events)
	h.OnPublishEnd(wctx, relay.PublishInfo{Events: events, Results: make([]broker.Result, len(events))})
	spans := spansNamed(exp, "publish") // two topics: no topic in the name
	if len(spans) != 1 {
		t.Fatalf("%d wave spans named publish, want 1 (all: %d)", len(spans), len(exp.GetSpans()))
	}
	a := attrMap(spans[0].Attributes)
	if len(spans[0].Links) != 128 || spans[0].DroppedLinks != 0 || a["outbox.batch.unlinked"] != "72" || a["messaging.batch.message_count"] != "300" || spans[0].Status.Code == codes.Error {
		t.Errorf("wave span: %d links (%d dropped), attributes %v, status %v", len(spans[0].Links), spans[0].DroppedLinks, a, spans[0].Status)
	}
	seen := map[trace.SpanID]bool{}
	for _, l := range spans[0].Links {
		if seen[l.SpanContext.SpanID()] {
			t.Errorf("two links to %v", l.SpanContext)
		}
		seen[l.SpanContext.SpanID()] = true
	}
	if _, ok := a["messaging.destination.name"]; ok {
		t.Errorf("a wave of two topics names one: %v", a)
	}
}
