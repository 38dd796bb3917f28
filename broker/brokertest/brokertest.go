package brokertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// Harness tells the suite how to use one adapter.
type Harness struct {
	// Name labels the adapter in failure messages.
	Name string
	// New returns a Broker plus a Receiver that sees what was published to
	// topic. The suite picks a fresh, unique topic per check (lower-case
	// letters, digits and underscores, at most 60 characters); the harness
	// creates whatever the broker needs for it (a stream, a queue) and
	// removes it in t.Cleanup. The suite closes the Broker itself; closing
	// it again in the harness's cleanup is fine.
	New func(t *testing.T, topic string) (broker.Broker, Receiver)
	// MaxPayload is the largest message the broker accepts, counting the
	// payload and the headers. The suite publishes a payload of
	// MaxPayload+1 bytes, and one that fits alone but not with a large
	// user header, and expects a permanent error for each, alone. Zero
	// skips those checks.
	MaxPayload int
	// Transport names the reserved header names the adapter refuses (see
	// broker.ReservedHeaders); "" means every transport's. The suite
	// publishes events carrying each of them, as rows written by plain SQL
	// can, and expects a permanent error for each, alone.
	Transport broker.Transport
	// Restart, when set, restarts the broker's server (same address, same
	// storage). The suite then checks that the Broker it already holds
	// recovers by itself within about 10 seconds.
	Restart func(t *testing.T)
	// AddTopic, when set, prepares one more topic for the Broker that New
	// returned (what New did for its own topic) and returns a Receiver for
	// it; the suite then publishes one batch to two topics. Nil skips that
	// check.
	AddTopic func(t *testing.T, b broker.Broker, topic string) Receiver
	// KeysInParallel says the adapter sends the events of different keys
	// in parallel (an HTTP adapter's concurrent requests), so that they
	// may arrive in any order; the suite then holds it to the order of
	// each key's events only.
	KeysInParallel bool
}

// Received is one message as a consumer saw it, decoded by the harness
// from the transport's binding.
type Received struct {
	EventID string // the event's identity (ce-id, Nats-Msg-Id, message-id, …)
	Type    string // the event type; "" when the message carried none
	Key     string // the event key; "" when the message carried none
	Topic   string // where it arrived (topic, subject, stream, …)
	Payload []byte // the message body
	// Headers holds the message's headers. It must contain every user
	// header of the event with its value unchanged; it may also hold the
	// transport's own headers, which the suite ignores.
	Headers map[string]string
}

// Receiver reads, in arrival order, what was published to one topic.
type Receiver interface {
	// Next blocks until the next message arrives or ctx ends (then it
	// returns ctx's error).
	Next(ctx context.Context) (Received, error)
}

// Run runs the conformance suite against the adapter h describes.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("brokertest: Harness.New is nil")
	}
	s := suite{h: h}
	checks := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"RoundTrip", s.roundTrip},
		{"EmptyBatch", s.emptyBatch},
		{"Batch500InOrder", s.batch500},
		{"OversizePermanent", s.oversize},
		{"OversizeWithHeadersPermanent", s.oversizeWithHeaders},
		{"ReservedHeaderPermanent", s.reservedHeaders},
		{"InvalidEventPermanent", s.invalidEvents},
		{"ContextEnded", s.contextEnded},
		{"Close", s.close},
		{"Concurrent", s.concurrent},
	}
	checks = append(checks, s.featureChecks()...)
	t.Run("Publish", func(t *testing.T) {
		for _, c := range checks {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.fn(t)
			})
		}
	})
	t.Run("Restart", s.restart)
}

type suite struct{ h Harness }

// open returns a Broker and Receiver for a fresh topic; the Broker is
// closed when the test ends.
func (s suite) open(t *testing.T) (broker.Broker, Receiver, string) {
	t.Helper()
	topic := uniqueTopic(t)
	b, r := s.h.New(t, topic)
	if b == nil || r == nil {
		t.Fatalf("%s: Harness.New returned a nil Broker or Receiver", s.h.Name)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("%s: Close: %v", s.h.Name, err)
		}
	})
	return b, r, topic
}

func uniqueTopic(t *testing.T) string {
	name := t.Name()
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	base := b.String()
	if len(base) > 40 {
		base = base[:40]
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	return "bt_" + base + "_" + hex.EncodeToString(rnd[:])
}

// newEvent returns a valid event for topic; i becomes its row id.
func newEvent(topic string, i int) outbox.Event {
	return outbox.Event{
		ID:        int64(i + 1),
		CreatedAt: time.Now(),
		Message: outbox.Message{
			EventID:       outbox.NewEventID(),
			Topic:         topic,
			Key:           "key-0",
			Type:          "brokertest.Event",
			AggregateType: "Thing",
			SchemaVersion: 1,
			ContentType:   "application/octet-stream",
			Payload:       []byte(fmt.Sprintf("event %d", i)),
		},
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// publishOK publishes events and fails the test unless every result is nil.
func (s suite) publishOK(t *testing.T, b broker.Broker, events []outbox.Event) {
	t.Helper()
	res := b.Publish(ctxFor(t, 30*time.Second), events)
	if len(res) != len(events) {
		t.Fatalf("%s: Publish returned %d results for %d events", s.h.Name, len(res), len(events))
	}
	for i, err := range res {
		if err != nil {
			t.Fatalf("%s: Publish result %d of %d: %v", s.h.Name, i, len(events), err)
		}
	}
}

// receive reads n messages, failing the test if they do not all come
// within 30 seconds.
func (s suite) receive(t *testing.T, r Receiver, n int) []Received {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	out := make([]Received, 0, n)
	for len(out) < n {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("%s: received %d of %d messages, then: %v", s.h.Name, len(out), n, err)
		}
		out = append(out, m)
	}
	return out
}

// receiveLike reads len(want) messages, as receive does, and returns them
// in the order of want: as they came, or, for an adapter that sends keys
// in parallel, regrouped so that each key's messages keep their arrival
// order among themselves (a keyless event is a key of its own).
func (s suite) receiveLike(t *testing.T, r Receiver, want []outbox.Event) []Received {
	t.Helper()
	got := s.receive(t, r, len(want))
	if !s.h.KeysInParallel {
		return got
	}
	unit := func(id, key string) string {
		if key == "" {
			return "id:" + id
		}
		return "key:" + key
	}
	queues := make(map[string][]Received)
	for _, m := range got {
		u := unit(m.EventID, m.Key)
		queues[u] = append(queues[u], m)
	}
	out := make([]Received, 0, len(got))
	var rest []Received
	for _, e := range want {
		u := unit(e.EventID, e.Key)
		if q := queues[u]; len(q) > 0 {
			out = append(out, q[0])
			queues[u] = q[1:]
		}
	}
	for _, q := range queues {
		rest = append(rest, q...)
	}
	return append(out, rest...) // what matched nothing, to be reported
}

// expectNothing fails the test if another message arrives soon.
func (s suite) expectNothing(t *testing.T, r Receiver) {
	t.Helper()
	m, err := r.Next(ctxFor(t, 300*time.Millisecond))
	if err == nil {
		t.Errorf("%s: unexpected extra message: event %s, payload %d bytes", s.h.Name, m.EventID, len(m.Payload))
	}
}

// same reports how got differs from the event want, or "".
func same(want outbox.Event, got Received) string {
	var diffs []string
	if got.EventID != want.EventID {
		diffs = append(diffs, fmt.Sprintf("EventID %q, want %q", got.EventID, want.EventID))
	}
	if got.Topic != want.Topic {
		diffs = append(diffs, fmt.Sprintf("Topic %q, want %q", got.Topic, want.Topic))
	}
	if got.Key != want.Key {
		diffs = append(diffs, fmt.Sprintf("Key %q, want %q", got.Key, want.Key))
	}
	if got.Type != want.Type {
		diffs = append(diffs, fmt.Sprintf("Type %q, want %q", got.Type, want.Type))
	}
	if !bytes.Equal(got.Payload, want.Payload) {
		diffs = append(diffs, fmt.Sprintf("Payload %q, want %q", clip(got.Payload), clip(want.Payload)))
	}
	for k, v := range want.Headers {
		g, ok := got.Headers[k]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("header %q missing", k))
		case g != v:
			diffs = append(diffs, fmt.Sprintf("header %q = %q, want %q", k, g, v))
		}
	}
	return strings.Join(diffs, "; ")
}

func clip(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}

func allBytes() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func (s suite) roundTrip(t *testing.T) {
	b, r, topic := s.open(t)
	events := make([]outbox.Event, 5)
	for i := range events {
		events[i] = newEvent(topic, i)
	}
	events[0].Payload = allBytes()
	events[0].Key = "order-42"
	events[0].Type = "OrderPaid"
	events[0].Headers = map[string]string{"trace": "00-abc-01", "tenant": "ünïcödé ✓ 日本", "empty": "", "Mixed-Case": "Value With Spaces",
		"X-Request-Id": "req-7", "x-b3-traceid": "80f198ee56343ba864fe8b2a57d3eff7"}
	events[1].Payload = []byte("héllo wörld — 日本語 🚀 \"quoted\" 100%")
	events[1].ContentType = "text/plain; charset=utf-8"
	events[1].Key = "ключ 1 with space & \"quotes\" 100%"
	events[1].Type = "Type with spaces, ünïcode & 100%"
	events[2].Payload = []byte{}
	events[2].Key = ""
	events[2].Type = "t" // the one attribute CloudEvents requires besides id, source and specversion
	events[2].AggregateType = ""
	events[2].SchemaVersion = 0
	events[3].Payload = []byte(`{"id":42,"note":"json"}`)
	events[3].ContentType = "application/json"
	events[3].Key = strings.Repeat("k", outbox.MaxKeyLen)
	events[3].Headers = map[string]string{"a": "1", "b": "2", "c": "3"}
	events[4].Payload = bytes.Repeat(allBytes(), 64) // 16 KiB of binary

	s.publishOK(t, b, events)
	got := s.receive(t, r, len(events))
	byID := make(map[string]Received, len(got))
	for _, m := range got {
		byID[m.EventID] = m
	}
	for i, e := range events {
		m, ok := byID[e.EventID]
		if !ok {
			t.Errorf("%s: event %d (%s) did not arrive", s.h.Name, i, e.EventID)
			continue
		}
		if d := same(e, m); d != "" {
			t.Errorf("%s: event %d: %s", s.h.Name, i, d)
		}
	}
	s.expectNothing(t, r)
}

func (s suite) emptyBatch(t *testing.T) {
	b, _, _ := s.open(t)
	if res := b.Publish(ctxFor(t, 10*time.Second), nil); len(res) != 0 {
		t.Errorf("%s: Publish(nil) returned %d results, want 0", s.h.Name, len(res))
	}
	if res := b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{}); len(res) != 0 {
		t.Errorf("%s: Publish(empty) returned %d results, want 0", s.h.Name, len(res))
	}
}

func (s suite) batch500(t *testing.T) {
	b, r, topic := s.open(t)
	events := make([]outbox.Event, 500)
	for i := range events {
		events[i] = newEvent(topic, i)
		events[i].Key = "one-key" // per-key order is what every broker promises
	}
	s.publishOK(t, b, events)
	got := s.receive(t, r, len(events))
	for i, m := range got {
		if m.EventID != events[i].EventID {
			t.Fatalf("%s: message %d is event %s (payload %q), want %s (payload %q): out of order or lost",
				s.h.Name, i, m.EventID, m.Payload, events[i].EventID, events[i].Payload)
		}
		if d := same(events[i], m); d != "" {
			t.Fatalf("%s: message %d: %s", s.h.Name, i, d)
		}
	}
	s.expectNothing(t, r)
}

func (s suite) oversize(t *testing.T) {
	if s.h.MaxPayload <= 0 {
		t.Skip("Harness.MaxPayload not set")
	}
	b, r, topic := s.open(t)
	events := []outbox.Event{newEvent(topic, 0), newEvent(topic, 1), newEvent(topic, 2)}
	events[1].Payload = bytes.Repeat([]byte{'x'}, s.h.MaxPayload+1)
	events[2].Payload = bytes.Repeat([]byte{'y'}, s.h.MaxPayload/2)
	for i := range events {
		events[i].Key = fmt.Sprintf("key-%d", i) // independent keys: one poison event must not fail the others
	}
	res := b.Publish(ctxFor(t, 30*time.Second), events)
	if len(res) != len(events) {
		t.Fatalf("%s: Publish returned %d results for %d events", s.h.Name, len(res), len(events))
	}
	if res[0] != nil || res[2] != nil {
		t.Errorf("%s: the events around the oversize one failed: %v, %v", s.h.Name, res[0], res[2])
	}
	if res[1] == nil {
		t.Fatalf("%s: a payload of MaxPayload+1 = %d bytes was confirmed", s.h.Name, s.h.MaxPayload+1)
	}
	if !broker.IsPermanent(res[1]) {
		t.Errorf("%s: oversize payload error is not permanent (the relay would retry it forever): %v", s.h.Name, res[1])
	}
	got := s.receiveLike(t, r, []outbox.Event{events[0], events[2]})
	for i, want := range []outbox.Event{events[0], events[2]} {
		if d := same(want, got[i]); d != "" {
			t.Errorf("%s: message %d: %s", s.h.Name, i, d)
		}
	}
	s.expectNothing(t, r)
}

// onlyRefused publishes good, bad[0], good, bad[1], …, good, each on a key
// of its own, and checks that every bad event, and only those, got a
// permanent error wrapping want, and that the good ones arrived in order.
func (s suite) onlyRefused(t *testing.T, b broker.Broker, r Receiver, topic string, bad []outbox.Event, want error, what []string) {
	t.Helper()
	var events []outbox.Event
	var good []outbox.Event
	for i := 0; i <= len(bad); i++ {
		g := newEvent(topic, 2*i)
		g.Key = fmt.Sprintf("good-%d", i)
		events = append(events, g)
		good = append(good, g)
		if i < len(bad) {
			events = append(events, bad[i])
		}
	}
	res := b.Publish(ctxFor(t, 30*time.Second), events)
	if len(res) != len(events) {
		t.Fatalf("%s: Publish returned %d results for %d events", s.h.Name, len(res), len(events))
	}
	for i, err := range res {
		if i%2 == 0 {
			if err != nil {
				t.Errorf("%s: a good event next to the bad ones failed: %v", s.h.Name, err)
			}
			continue
		}
		switch {
		case err == nil:
			t.Errorf("%s: %s: confirmed; want a permanent error", s.h.Name, what[i/2])
		case !broker.IsPermanent(err):
			t.Errorf("%s: %s: %v; want a permanent error (the relay would retry it forever)", s.h.Name, what[i/2], err)
		case want != nil && !errors.Is(err, want):
			t.Errorf("%s: %s: %v; want it to wrap %v", s.h.Name, what[i/2], err, want)
		}
	}
	got := s.receiveLike(t, r, good)
	for i, m := range got {
		if d := same(good[i], m); d != "" {
			t.Errorf("%s: message %d: %s", s.h.Name, i, d)
		}
	}
	s.expectNothing(t, r)
}

// badEvent returns a valid event on a key of its own, for a check to spoil.
func badEvent(topic string, i int) outbox.Event {
	e := newEvent(topic, 2*i+1)
	e.Key = fmt.Sprintf("bad-%d", i) // a key of its own: an adapter may hold a failed key's later events
	return e
}

func (s suite) oversizeWithHeaders(t *testing.T) {
	if s.h.MaxPayload <= 0 {
		t.Skip("Harness.MaxPayload not set")
	}
	b, r, topic := s.open(t)
	e := badEvent(topic, 0)
	e.Payload = bytes.Repeat([]byte{'x'}, s.h.MaxPayload-100) // fits alone
	e.Headers = map[string]string{"big": strings.Repeat("h", 200)}
	s.onlyRefused(t, b, r, topic, []outbox.Event{e}, nil, []string{"a payload that fits alone but not with its headers"})
}

func (s suite) reservedHeaders(t *testing.T) {
	b, r, topic := s.open(t)
	var bad []outbox.Event
	var what []string
	for i, rh := range broker.ReservedHeaders(s.h.Transport) {
		name := rh.Name
		if rh.Prefix {
			name += "x"
		}
		if i%2 == 1 { // names are reserved in any case
			name = strings.ToUpper(name[:1]) + name[1:]
		}
		e := badEvent(topic, i)
		e.Headers = map[string]string{"ok": "1", name: "v"}
		if !strings.ContainsAny(name, ":") { // only AMQP's cloudEvents: prefix is not a token
			bad = append(bad, e)
			what = append(what, fmt.Sprintf("reserved header %q", name))
		}
	}
	if len(bad) == 0 {
		t.Fatalf("%s: broker.ReservedHeaders(%q) lists nothing", s.h.Name, s.h.Transport)
	}
	s.onlyRefused(t, b, r, topic, bad, outbox.ErrReservedHeader, what)
}

func (s suite) invalidEvents(t *testing.T) {
	b, r, topic := s.open(t)
	cases := []struct {
		what string
		edit func(*outbox.Event)
	}{
		{"an empty type", func(e *outbox.Event) { e.Type = "" }},
		{"a TAB in the type", func(e *outbox.Event) { e.Type = "Order\tPaid" }},
		{"a C1 control character in the type", func(e *outbox.Event) { e.Type = "Order\u0085Paid" }},
		{"a line feed in the key", func(e *outbox.Event) { e.Key = "order\n42" }},
		{"DEL in the aggregate type", func(e *outbox.Event) { e.AggregateType = "Order\x7f" }},
		{"a NUL in the content type", func(e *outbox.Event) { e.ContentType = "text/plain\x00" }},
		{"invalid UTF-8 in the type", func(e *outbox.Event) { e.Type = "Order\xffPaid" }},
		{"a negative schema version", func(e *outbox.Event) { e.SchemaVersion = -1 }},
		{"an event id that is not a UUID", func(e *outbox.Event) { e.EventID = "not-a-uuid" }},
		{"an empty event id", func(e *outbox.Event) { e.EventID = "" }},
		{"a CR LF in a header value", func(e *outbox.Event) { e.Headers = map[string]string{"h": "a\r\nNats-Rollup: all"} }},
		{"a header value with a trailing space", func(e *outbox.Event) { e.Headers = map[string]string{"h": "v "} }},
		{"a space in a header name", func(e *outbox.Event) { e.Headers = map[string]string{"a b": "v"} }},
		{"a non-ASCII header name", func(e *outbox.Event) { e.Headers = map[string]string{"tënant": "v"} }},
	}
	bad := make([]outbox.Event, len(cases))
	what := make([]string, len(cases))
	for i, c := range cases {
		bad[i] = badEvent(topic, i)
		c.edit(&bad[i])
		what[i] = c.what
	}
	s.onlyRefused(t, b, r, topic, bad, outbox.ErrInvalidMessage, what)
}

func (s suite) contextEnded(t *testing.T) {
	b, r, topic := s.open(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	short, cancel3 := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel3()
	time.Sleep(time.Millisecond)

	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"cancelled", cancelled}, {"deadline passed", expired}, {"short deadline", short}} {
		events := []outbox.Event{newEvent(topic, 0), newEvent(topic, 1), newEvent(topic, 2)}
		start := time.Now()
		res := b.Publish(c.ctx, events)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: Publish with a %s context took %v; it must return promptly", s.h.Name, c.name, d)
		}
		if len(res) != len(events) {
			t.Fatalf("%s: Publish returned %d results for %d events", s.h.Name, len(res), len(events))
		}
		for i, err := range res {
			switch {
			case err == nil:
				t.Errorf("%s: %s context: result %d is nil; a confirmation cannot have been awaited", s.h.Name, c.name, i)
			case broker.IsPermanent(err):
				t.Errorf("%s: %s context: result %d is permanent (the relay would bury the event): %v", s.h.Name, c.name, i, err)
			}
		}
	}

	// The broker still works afterwards. Events of the failed calls may or
	// may not have reached the broker (at least once), so skip over them.
	e := newEvent(topic, 9)
	s.publishOK(t, b, []outbox.Event{e})
	ctx := ctxFor(t, 30*time.Second)
	for {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("%s: the event published after the cancelled calls did not arrive: %v", s.h.Name, err)
		}
		if m.EventID == e.EventID {
			break
		}
	}
}

func (s suite) close(t *testing.T) {
	b, _, topic := s.open(t)
	s.publishOK(t, b, []outbox.Event{newEvent(topic, 0)})
	for i := 1; i <= 2; i++ {
		if err := b.Close(ctxFor(t, 10*time.Second)); err != nil {
			t.Errorf("%s: Close #%d: %v", s.h.Name, i, err)
		}
	}
	events := []outbox.Event{newEvent(topic, 1), newEvent(topic, 2)}
	start := time.Now()
	res := b.Publish(ctxFor(t, 10*time.Second), events)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%s: Publish after Close took %v; it must fail at once", s.h.Name, d)
	}
	if len(res) != len(events) {
		t.Fatalf("%s: Publish after Close returned %d results for %d events", s.h.Name, len(res), len(events))
	}
	for i, err := range res {
		switch {
		case err == nil:
			t.Errorf("%s: Publish after Close: result %d is nil", s.h.Name, i)
		case broker.IsPermanent(err):
			t.Errorf("%s: Publish after Close: result %d is permanent (a relay shutting down would bury events): %v", s.h.Name, i, err)
		}
	}
}

func (s suite) concurrent(t *testing.T) {
	b, r, topic := s.open(t)
	const goroutines, batches, perBatch = 4, 5, 20
	sent := make([][]outbox.Event, goroutines)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*batches*perBatch)
	for g := range goroutines {
		for i := range batches * perBatch {
			e := newEvent(topic, g*1000+i)
			e.Key = fmt.Sprintf("g%d", g)
			sent[g] = append(sent[g], e)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < batches; k++ {
				batch := sent[g][k*perBatch : (k+1)*perBatch]
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				res := b.Publish(ctx, batch)
				cancel()
				if len(res) != len(batch) {
					errs <- fmt.Errorf("goroutine %d: %d results for %d events", g, len(res), len(batch))
					return
				}
				for i, err := range res {
					if err != nil {
						errs <- fmt.Errorf("goroutine %d, batch %d, event %d: %w", g, k, i, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("%s: concurrent Publish: %v", s.h.Name, err)
	}

	got := s.receive(t, r, goroutines*batches*perBatch)
	next := make(map[string]int) // key → index of the next expected event
	seen := make(map[string]bool)
	for _, m := range got {
		if seen[m.EventID] {
			t.Fatalf("%s: event %s arrived twice", s.h.Name, m.EventID)
		}
		seen[m.EventID] = true
		var g int
		if _, err := fmt.Sscanf(m.Key, "g%d", &g); err != nil || g < 0 || g >= goroutines {
			t.Fatalf("%s: message with unexpected key %q", s.h.Name, m.Key)
		}
		want := sent[g][next[m.Key]]
		if m.EventID != want.EventID {
			t.Fatalf("%s: key %s: got event %s (payload %q), want %s (payload %q): per-key order broken",
				s.h.Name, m.Key, m.EventID, m.Payload, want.EventID, want.Payload)
		}
		next[m.Key]++
	}
}

func (s suite) restart(t *testing.T) {
	if s.h.Restart == nil {
		t.Skip("Harness.Restart not set")
	}
	b, r, topic := s.open(t)
	before := newEvent(topic, 0)
	s.publishOK(t, b, []outbox.Event{before})

	s.h.Restart(t)

	after := newEvent(topic, 1)
	const attemptTimeout = 2 * time.Second
	start := time.Now()
	var last []error
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
		t0 := time.Now()
		last = b.Publish(ctx, []outbox.Event{after})
		cancel()
		if d := time.Since(t0); d > attemptTimeout+time.Second {
			t.Errorf("%s: Publish attempt %d took %v with a %v deadline: it must not hang while the server is away", s.h.Name, attempt, d, attemptTimeout)
		}
		if len(last) != 1 {
			t.Fatalf("%s: Publish returned %d results for 1 event", s.h.Name, len(last))
		}
		if last[0] == nil {
			t.Logf("%s: publishing recovered %v after the restart (attempt %d)", s.h.Name, time.Since(start).Round(time.Millisecond), attempt)
			break
		}
		if broker.IsPermanent(last[0]) {
			t.Errorf("%s: attempt %d during recovery gave a permanent error (the relay would bury the event): %v", s.h.Name, attempt, last[0])
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s: publishing did not recover within 10s of the restart; last error: %v", s.h.Name, last[0])
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Both events are there; retried attempts may have left duplicates.
	want := map[string]bool{before.EventID: true, after.EventID: true}
	ctx := ctxFor(t, 30*time.Second)
	for len(want) > 0 {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("%s: after the restart, events still missing: %v (%v)", s.h.Name, want, err)
		}
		delete(want, m.EventID)
	}
}
