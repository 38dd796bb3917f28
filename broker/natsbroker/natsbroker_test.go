package natsbroker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/brokertest"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/internal/testnats"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// --- helpers

func connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func dial(t *testing.T, url string, cfg natsbroker.Config) *natsbroker.Broker {
	t.Helper()
	b, err := natsbroker.Dial(url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func uniqueName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// createStream makes a stream named like its only subject and deletes it
// when the test ends.
func createStream(t *testing.T, js jetstream.JetStream, subject string, storage jetstream.StorageType) jetstream.Stream {
	t.Helper()
	return newStream(t, js, jetstream.StreamConfig{Name: subject, Subjects: []string{subject}, Storage: storage})
}

// createDirectStream is createStream with AllowDirect, for the
// conformance suite's receiver: it reads by direct get, which the stream
// answers itself. Through the JetStream API (one request per message,
// queued behind every other API call of the server) a loaded machine read
// 300 of 400 messages in the suite's 30 s. A direct get adds headers of
// its own (Nats-Stream, Nats-Sequence, …), which the suite does not check.
func createDirectStream(t *testing.T, js jetstream.JetStream, subject string, storage jetstream.StorageType) jetstream.Stream {
	t.Helper()
	return newStream(t, js, jetstream.StreamConfig{Name: subject, Subjects: []string{subject}, Storage: storage, AllowDirect: true})
}

func newStream(t *testing.T, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	subject := cfg.Name
	s, err := js.CreateStream(ctxFor(t, 10*time.Second), cfg)
	if err != nil {
		t.Fatalf("create stream %s: %v", subject, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, subject); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("delete stream %s: %v", subject, err)
		}
	})
	return s
}

// streamReceiver reads a stream message by message, by sequence number, so
// it keeps working across a server restart.
type streamReceiver struct {
	stream jetstream.Stream
	seq    uint64
}

func (r *streamReceiver) Next(ctx context.Context) (brokertest.Received, error) {
	for {
		m, err := r.stream.GetMsg(ctx, r.seq+1)
		if err == nil {
			r.seq++
			return decode(m)
		}
		if ctx.Err() != nil {
			return brokertest.Received{}, ctx.Err()
		}
		// Not there yet, or the server is restarting: poll.
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return brokertest.Received{}, ctx.Err()
		}
	}
}

// decode reads the CloudEvents binary-mode headers back, as a consumer
// would.
func decode(m *jetstream.RawStreamMsg) (brokertest.Received, error) {
	attr := func(name string) (string, error) {
		return broker.PercentDecode(m.Header.Get(natsbroker.HeaderPrefix + name))
	}
	r := brokertest.Received{Topic: m.Subject, Payload: m.Data, Headers: make(map[string]string, len(m.Header))}
	var err error
	if r.EventID, err = attr(broker.AttrID); err != nil {
		return r, err
	}
	if r.Type, err = attr(broker.AttrType); err != nil {
		return r, err
	}
	if r.Key, err = attr(broker.AttrPartitionKey); err != nil {
		return r, err
	}
	for k, v := range m.Header {
		r.Headers[k] = v[0]
	}
	return r, nil
}

func harness(name, url string, admin *nats.Conn, storage jetstream.StorageType) brokertest.Harness {
	return brokertest.Harness{
		Name: name,
		New: func(t *testing.T, topic string) (broker.Broker, brokertest.Receiver) {
			js, err := jetstream.New(admin)
			if err != nil {
				t.Fatal(err)
			}
			stream := createDirectStream(t, js, topic, storage)
			return dial(t, url, natsbroker.Config{}), &streamReceiver{stream: stream}
		},
		MaxPayload: int(admin.MaxPayload()),
		Transport:  broker.NATS,
		AddTopic: func(t *testing.T, _ broker.Broker, topic string) brokertest.Receiver {
			js, err := jetstream.New(admin)
			if err != nil {
				t.Fatal(err)
			}
			return &streamReceiver{stream: createDirectStream(t, js, topic, storage)}
		},
	}
}

func event(topic string, i int) outbox.Event {
	return outbox.Event{ID: int64(i + 1), CreatedAt: time.Now(), Message: outbox.Message{
		EventID: outbox.NewEventID(), Topic: topic, Key: "k", Type: "T", SchemaVersion: 1,
		ContentType: outbox.DefaultContentType, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)),
	}}
}

// --- the conformance suite, twice

func TestConformanceServer(t *testing.T) {
	url := testenv.Require(t, testenv.NATS)
	admin := connect(t, url)
	brokertest.Run(t, harness("natsbroker (server)", url, admin, jetstream.MemoryStorage))
}

func TestConformanceEmbedded(t *testing.T) {
	srv := testnats.Start(t)
	admin := connect(t, srv.URL())
	h := harness("natsbroker (embedded)", srv.URL(), admin, jetstream.FileStorage)
	h.Restart = func(t *testing.T) { srv.Restart(t) }
	brokertest.Run(t, h)
}

// --- NATS-specific behaviour, on an embedded server

func TestNoStreamIsPermanentWithClearMessage(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	admin := connect(t, srv.URL())
	js, _ := jetstream.New(admin)
	covered := uniqueName("covered")
	stream := createStream(t, js, covered, jetstream.MemoryStorage)
	b := dial(t, srv.URL(), natsbroker.Config{})

	missing := uniqueName("nostream")
	events := []outbox.Event{event(covered, 0), event(missing, 1), event(covered, 2)}
	res := b.Publish(ctxFor(t, 10*time.Second), events)
	if res[0] != nil || res[2] != nil {
		t.Errorf("events on a covered subject failed: %v, %v", res[0], res[2])
	}
	err := res[1]
	if !broker.IsPermanent(err) || !errors.Is(err, natsbroker.ErrNoStream) || !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("no stream: got %v; want a permanent error wrapping ErrNoStream", err)
	}
	want := fmt.Sprintf("no JetStream stream captures subject %q; create one (outbox broker setup --broker URL --stream NAME --subjects '%s') or fix the topic", missing, missing)
	if !strings.Contains(err.Error(), want) {
		t.Errorf("message %q does not say %q", err, want)
	}
	if info, _ := stream.Info(ctxFor(t, 5*time.Second)); info == nil || info.State.Msgs != 2 {
		t.Errorf("stream state = %+v, want 2 messages", info)
	}
}

func TestDuplicateEventIDIsDeduplicatedAndReportedAsSuccess(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	admin := connect(t, srv.URL())
	js, _ := jetstream.New(admin)
	subject := uniqueName("dedup")
	stream := createStream(t, js, subject, jetstream.MemoryStorage)
	b := dial(t, srv.URL(), natsbroker.Config{})

	e := event(subject, 0)
	for i, batch := range [][]outbox.Event{{e}, {e}, {e, e}} { // again later, and twice in one batch
		for j, err := range b.Publish(ctxFor(t, 10*time.Second), batch) {
			if err != nil {
				t.Errorf("publish %d, event %d: %v", i, j, err)
			}
		}
	}
	info, err := stream.Info(ctxFor(t, 5*time.Second))
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("stream holds %v messages (%v); want 1", info.State.Msgs, err)
	}
	// The same id through the raw client: JetStream flags it as a duplicate,
	// which Publish above counted as success.
	ack, err := js.PublishMsg(ctxFor(t, 5*time.Second), &nats.Msg{Subject: subject, Data: []byte("x"), Header: nats.Header{jetstream.MsgIDHeader: {e.EventID}}})
	if err != nil || !ack.Duplicate {
		t.Errorf("raw publish of the same Nats-Msg-Id: ack %+v, %v; want Duplicate", ack, err)
	}
}

func TestHeaderMapping(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	admin := connect(t, srv.URL())
	js, _ := jetstream.New(admin)
	subject := uniqueName("headers")
	stream := createStream(t, js, subject, jetstream.MemoryStorage)
	b := dial(t, srv.URL(), natsbroker.Config{Source: "/billing service"})

	e := event(subject, 0)
	e.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.FixedZone("CET", 3600))
	e.Key = "order 42 ü"
	e.Type = "OrderPaid"
	e.AggregateType = "Order"
	e.SchemaVersion = 3
	e.ContentType = "application/json; charset=utf-8"
	e.Headers = map[string]string{
		"traceparent": "00-abc-def-01", "Tenant": "acme ✓", "X-Request-Id": "req-1",
		// Reserved by other transports only: NATS delivers them.
		"x-death": "kept", "ce_type": "kept",
	}
	// Names NATS reserves, only reachable by bypassing outbox.Validate:
	// each event carrying one is refused, never sent with it dropped.
	var forged []outbox.Event
	for _, name := range []string{"Nats-Rollup", "CE-ID", "ce-type", "Content-Type", "Status", "description"} {
		f := event(subject, 1)
		f.Headers = map[string]string{name: "forged"}
		forged = append(forged, f)
	}
	res := b.Publish(ctxFor(t, 10*time.Second), append([]outbox.Event{e}, forged...))
	if res[0] != nil {
		t.Fatal(res[0])
	}
	for i, err := range res[1:] {
		if !broker.IsPermanent(err) || !errors.Is(err, outbox.ErrReservedHeader) {
			t.Errorf("header %v: %v; want a permanent error wrapping outbox.ErrReservedHeader", forged[i].Headers, err)
		}
	}
	m, err := stream.GetMsg(ctxFor(t, 5*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Nats-Msg-Id":        e.EventID,
		"ce-id":              e.EventID,
		"ce-source":          "/billing%20service",
		"ce-specversion":     "1.0",
		"ce-type":            "OrderPaid",
		"ce-time":            "2026-01-02T02:04:05.6Z",
		"ce-datacontenttype": "application/json;%20charset=utf-8",
		"ce-partitionkey":    "order%2042%20%C3%BC",
		"ce-schemaversion":   "3",
		"ce-aggregatetype":   "Order",
		"traceparent":        "00-abc-def-01",
		"Tenant":             "acme ✓",
		"X-Request-Id":       "req-1",
		"x-death":            "kept",
		"ce_type":            "kept",
	}
	got := make(map[string]string)
	for k, v := range m.Header {
		if len(v) != 1 {
			t.Errorf("header %q has %d values", k, len(v))
		}
		got[k] = v[0]
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("header %q = %q, want %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected header %q = %q", k, got[k])
		}
	}
	if string(m.Data) != string(e.Payload) || m.Subject != subject {
		t.Errorf("subject %q, data %q", m.Subject, m.Data)
	}
}

func TestBadEventsArePermanentAndAlone(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	admin := connect(t, srv.URL())
	js, _ := jetstream.New(admin)
	subject := uniqueName("bad")
	stream := createStream(t, js, subject, jetstream.MemoryStorage)
	b := dial(t, srv.URL(), natsbroker.Config{})

	noID := event(subject, 1)
	noID.EventID = ""
	spaced := event("has space", 2)
	wildcard := event("orders.*", 3)
	emptyToken := event("orders..x", 4)
	crlf := event(subject, 5)
	crlf.Headers = map[string]string{"h": "a\r\nNats-Rollup: all"}
	events := []outbox.Event{event(subject, 0), noID, spaced, wildcard, emptyToken, crlf, event(subject, 6)}
	res := b.Publish(ctxFor(t, 10*time.Second), events)
	if res[0] != nil || res[6] != nil {
		t.Errorf("good events failed: %v, %v", res[0], res[6])
	}
	for i := 1; i <= 5; i++ {
		if !broker.IsPermanent(res[i]) {
			t.Errorf("event %d (%q): %v; want a permanent error", i, events[i].Topic, res[i])
		}
	}
	if info, _ := stream.Info(ctxFor(t, 5*time.Second)); info == nil || info.State.Msgs != 2 {
		t.Errorf("stream state = %+v, want 2 messages", info)
	}
}

func TestStreamMaxMsgSizeIsPermanent(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	admin := connect(t, srv.URL())
	js, _ := jetstream.New(admin)
	subject := uniqueName("small")
	_, err := js.CreateStream(ctxFor(t, 5*time.Second), jetstream.StreamConfig{Name: subject, Subjects: []string{subject}, Storage: jetstream.MemoryStorage, MaxMsgSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	b := dial(t, srv.URL(), natsbroker.Config{})
	// The refused message sits among good ones on the same subject: the
	// PubAcks of one topic are only counted (see call), so the refusal
	// sends the topic's events again one by one, and JetStream's
	// deduplication keeps the good ones stored once.
	events := make([]outbox.Event, 10)
	for i := range events {
		events[i] = event(subject, i)
	}
	events[5].Payload = make([]byte, 2048)
	res := b.Publish(ctxFor(t, 10*time.Second), events)
	for i, err := range res {
		if i == 5 && !broker.IsPermanent(err) {
			t.Errorf("the oversized event: %v; want a permanent error", err)
		}
		if i != 5 && err != nil {
			t.Errorf("event %d: %v; want nil", i, err)
		}
	}
	stream, err := js.Stream(ctxFor(t, 5*time.Second), subject)
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := stream.Info(ctxFor(t, 5*time.Second)); info == nil || info.State.Msgs != 9 {
		t.Errorf("stream state = %+v, want the 9 good messages, each once", info)
	}
}

func TestDisconnectedFailsFastAndRecovers(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	admin := connect(t, srv.URL())
	js, _ := jetstream.New(admin)
	subject := uniqueName("outage")
	createStream(t, js, subject, jetstream.FileStorage)
	b := dial(t, srv.URL(), natsbroker.Config{})

	srv.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for b.Conn().Status() == nats.CONNECTED && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	res := b.Publish(ctxFor(t, 3*time.Second), []outbox.Event{event(subject, 0), event(subject, 1)})
	if d := time.Since(start); d > time.Second {
		t.Errorf("Publish while disconnected took %v; it must fail fast", d)
	}
	for i, err := range res {
		if err == nil || broker.IsPermanent(err) || !errors.Is(err, natsbroker.ErrNotConnected) {
			t.Errorf("result %d while disconnected = %v; want transient ErrNotConnected", i, err)
		}
	}

	srv.Restart(t) // stopped above: this starts it again
	e := event(subject, 2)
	for {
		res := b.Publish(ctxFor(t, 2*time.Second), []outbox.Event{e})
		if res[0] == nil {
			break
		}
		if broker.IsPermanent(res[0]) {
			t.Fatalf("permanent error during recovery: %v", res[0])
		}
		if time.Since(start) > 15*time.Second {
			t.Fatalf("no recovery after the server came back: %v", res[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestPublishWithoutAckHonoursDeadline(t *testing.T) {
	t.Parallel()
	// A plain NATS subscriber on the subject answers nothing, so no PubAck
	// ever comes: Publish must give up at the deadline with transient errors.
	srv := testnats.Start(t)
	subject := silentSubject(t, srv.URL(), "silent")
	// MaxPending 1: the second event waits for room that never frees.
	for _, maxPending := range []int{0, 1} {
		b := dial(t, srv.URL(), natsbroker.Config{Timeout: 300 * time.Millisecond, MaxPending: maxPending})
		start := time.Now()
		res := b.Publish(context.Background(), []outbox.Event{event(subject, 0), event(subject, 1)})
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("MaxPending %d: Publish took %v with a 300ms Timeout", maxPending, d)
		}
		for i, err := range res {
			if err == nil || broker.IsPermanent(err) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("MaxPending %d: result %d = %v; want a transient deadline error", maxPending, i, err)
			}
		}
	}
}

func TestConnectionLostWhileAwaitingFailsFast(t *testing.T) {
	t.Parallel()
	// No PubAck comes (a plain subscriber), then the server goes away:
	// Publish must not sit out its 10s Timeout.
	srv := testnats.Start(t)
	subject := silentSubject(t, srv.URL(), "lost")
	b := dial(t, srv.URL(), natsbroker.Config{})
	time.AfterFunc(200*time.Millisecond, srv.Stop)
	start := time.Now()
	res := b.Publish(context.Background(), []outbox.Event{event(subject, 0)})
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Publish took %v after the connection was lost", d)
	}
	if err := res[0]; err == nil || broker.IsPermanent(err) || !errors.Is(err, natsbroker.ErrNotConnected) {
		t.Errorf("result = %v; want a transient ErrNotConnected", err)
	}
}

func TestMaxPendingSmallerThanTheBatches(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	admin := connect(t, srv.URL())
	js, _ := jetstream.New(admin)
	subject := uniqueName("window")
	stream := createStream(t, js, subject, jetstream.MemoryStorage)
	b := dial(t, srv.URL(), natsbroker.Config{MaxPending: 7})

	const calls, perCall = 3, 100
	var wg sync.WaitGroup
	for c := range calls {
		wg.Go(func() {
			events := make([]outbox.Event, perCall)
			for i := range events {
				events[i] = event(subject, c*perCall+i)
			}
			for i, err := range b.Publish(ctxFor(t, 10*time.Second), events) {
				if err != nil {
					t.Errorf("call %d, event %d: %v", c, i, err)
				}
			}
		})
	}
	wg.Wait()
	if info, _ := stream.Info(ctxFor(t, 5*time.Second)); info == nil || info.State.Msgs != calls*perCall {
		t.Errorf("stream state = %+v, want %d messages", info, calls*perCall)
	}
}

func TestNewWithBorrowedConnLeavesItOpen(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	nc := connect(t, srv.URL())
	if _, err := natsbroker.New(nil, natsbroker.Config{}); err == nil {
		t.Error("New(nil) succeeded")
	}
	if _, err := natsbroker.New(nc, natsbroker.Config{Timeout: -1}); err == nil {
		t.Error("New with a negative Timeout succeeded")
	}
	b, err := natsbroker.New(nc, natsbroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if !nc.IsConnected() {
		t.Error("Close closed a connection the caller owns")
	}
}

func TestDialErrors(t *testing.T) {
	t.Parallel()
	if _, err := natsbroker.Dial("", natsbroker.Config{MaxPending: -1}); err == nil {
		t.Error("Dial with a negative MaxPending succeeded")
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = natsbroker.Dial("nats://user:secret@"+addr, natsbroker.Config{})
	if err == nil || strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "-js") {
		t.Errorf("Dial to a closed port: %v; want an error that hides the password and says what to check", err)
	}

	plain := testnats.StartPlain(t)
	_, err = natsbroker.Dial(plain.URL(), natsbroker.Config{})
	if err == nil || !strings.Contains(err.Error(), "-js") {
		t.Errorf("Dial to a server without JetStream: %v; want an error saying to enable it", err)
	}
}

// silentSubject returns a new subject with a plain NATS subscriber on it
// (no stream): a publish there gets no PubAck, ever.
func silentSubject(t *testing.T, url, prefix string) string {
	t.Helper()
	admin := connect(t, url)
	subject := uniqueName(prefix)
	sub, err := admin.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}
	return subject
}

// A payload of exactly max_payload cannot fit with its headers: Check
// refuses it at enqueue, and a row that skipped Check is permanent at
// publish with a reason naming both sizes. The largest payload Check
// accepts is stored.
func TestMaxPayloadCountsTheHeaders(t *testing.T) {
	t.Parallel()
	url := testenv.Require(t, testenv.NATS)
	admin := connect(t, url)
	js, _ := jetstream.New(admin)
	subject := uniqueName("maxpayload")
	createStream(t, js, subject, jetstream.MemoryStorage)
	b := dial(t, url, natsbroker.Config{})
	limit := int(b.Conn().MaxPayload())

	m := outbox.Message{Topic: subject, Key: "k", Type: "T", Payload: make([]byte, limit),
		Headers: map[string]string{"X-Request-Id": "r-1"}}.Normalized()
	err := b.Check(m)
	var ve *outbox.ValidationError
	if !errors.As(err, &ve) || ve.Field != "Payload" || !errors.Is(err, outbox.ErrPayloadTooLarge) || !strings.Contains(err.Error(), "max_payload") {
		t.Fatalf("Check of a %d-byte payload = %v; want a Payload ValidationError naming max_payload", limit, err)
	}
	e := outbox.Event{ID: 1, CreatedAt: time.Now(), Message: m}
	res := b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{e})
	if !broker.IsPermanent(res[0]) || !errors.Is(res[0], nats.ErrMaxPayload) || !strings.Contains(res[0].Error(), "bytes of headers") {
		t.Fatalf("publish of a %d-byte payload = %v; want a permanent error counting the headers", limit, res[0])
	}

	// The largest payload Check accepts goes through.
	lo, hi := 0, limit // Check accepts lo, refuses hi
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		m.Payload = make([]byte, mid)
		if b.Check(m) == nil {
			lo = mid
		} else {
			hi = mid
		}
	}
	m.Payload = make([]byte, lo)
	e = outbox.Event{ID: 2, CreatedAt: time.Now(), Message: m}
	if res := b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{e}); res[0] != nil {
		t.Fatalf("the largest payload Check accepts (%d bytes of %d) was refused: %v", lo, limit, res[0])
	}
	t.Logf("max_payload %d: Check accepts payloads up to %d bytes with these headers", limit, lo)
	if limit-lo > 400 {
		t.Errorf("Check leaves %d bytes for headers of a small event; it should count them, not guess", limit-lo)
	}
}

func TestCheckRefusesSubjectsAtEnqueue(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	b := dial(t, srv.URL(), natsbroker.Config{})
	for _, topic := range []string{"orders paid", "orders.*", "orders.>", "orders..paid", "orders."} {
		err := b.Check(outbox.Message{Topic: topic, Type: "T"}.Normalized())
		var ve *outbox.ValidationError
		if !errors.As(err, &ve) || ve.Field != "Topic" || !errors.Is(err, natsbroker.ErrInvalidSubject) {
			t.Errorf("Check(topic %q) = %v; want a Topic ValidationError wrapping ErrInvalidSubject", topic, err)
		}
	}
	if err := b.Check(outbox.Message{Topic: "orders.paid", Type: "T", Headers: map[string]string{"X-Request-Id": "r"}}.Normalized()); err != nil {
		t.Errorf("Check of a good message = %v", err)
	}
	if err := b.Check(outbox.Message{Topic: "orders.paid", Type: "T", Headers: map[string]string{"Status": "100"}}.Normalized()); !errors.Is(err, outbox.ErrReservedHeader) {
		t.Errorf("Check with a Status header = %v; want ErrReservedHeader", err)
	}
}
