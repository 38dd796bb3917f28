package amqpbroker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	neturl "net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/amqpbroker"
	"github.com/outbox-go/outbox/broker/brokertest"
	"github.com/outbox-go/outbox/inbox/amqpmsg"
	"github.com/outbox-go/outbox/internal/faultproxy"
	"github.com/outbox-go/outbox/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// --- helpers

func uniqueName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// admin opens a connection of the test's own, closed when the test ends.
func admin(t *testing.T) (string, *amqp.Connection) {
	t.Helper()
	url := testenv.Require(t, testenv.RabbitMQ)
	conn, err := amqp.Dial(url)
	if err != nil {
		testenv.Unavailable(t, testenv.RabbitMQ, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return url, conn
}

func dial(t *testing.T, url string, cfg amqpbroker.Config) *amqpbroker.Broker {
	t.Helper()
	b, err := amqpbroker.Dial(url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

// queueReceiver consumes one queue, auto-ack, in arrival order.
type queueReceiver struct {
	deliveries <-chan amqp.Delivery
}

// declareQueue declares a non-durable queue named name, bound to exchange
// for the routing key key unless exchange is "", and returns a receiver on
// it. The queue is deleted when the test ends.
func declareQueue(t *testing.T, conn *amqp.Connection, exchange, name, key string) *queueReceiver {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ch2, err := conn.Channel(); err == nil {
			_, _ = ch2.QueueDelete(name, false, false, false)
			_ = ch2.Close()
		}
		_ = ch.Close()
	})
	if _, err := ch.QueueDeclare(name, false, false, false, false, nil); err != nil {
		t.Fatalf("declare queue %s: %v", name, err)
	}
	if exchange != "" {
		if err := ch.QueueBind(name, key, exchange, false, nil); err != nil {
			t.Fatalf("bind queue %s: %v", name, err)
		}
	}
	d, err := ch.Consume(name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume %s: %v", name, err)
	}
	return &queueReceiver{deliveries: d}
}

func (r *queueReceiver) next(ctx context.Context) (amqp.Delivery, error) {
	select {
	case d, ok := <-r.deliveries:
		if !ok {
			return d, errors.New("the consumer's channel closed")
		}
		return d, nil
	case <-ctx.Done():
		return amqp.Delivery{}, ctx.Err()
	}
}

func (r *queueReceiver) Next(ctx context.Context) (brokertest.Received, error) {
	d, err := r.next(ctx)
	if err != nil {
		return brokertest.Received{}, err
	}
	return decode(d), nil
}

// decode reads the CloudEvents AMQP binding back, as a consumer would.
func decode(d amqp.Delivery) brokertest.Received {
	str := func(name string) string {
		s, _ := d.Headers[name].(string)
		return s
	}
	r := brokertest.Received{
		EventID: str(amqpbroker.AttrPrefix + broker.AttrID), Type: str(amqpbroker.AttrPrefix + broker.AttrType),
		Key: str(amqpbroker.AttrPrefix + broker.AttrPartitionKey), Topic: d.RoutingKey, Payload: d.Body,
		Headers: map[string]string{},
	}
	for k, v := range d.Headers {
		if s, ok := v.(string); ok {
			r.Headers[k] = s
		}
	}
	return r
}

func event(topic string, i int) outbox.Event {
	return outbox.Event{ID: int64(i + 1), CreatedAt: time.Now(), Message: outbox.Message{
		EventID: outbox.NewEventID(), Topic: topic, Key: "k", Type: "T", SchemaVersion: 1,
		ContentType: outbox.DefaultContentType, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)),
	}}
}

const testMax = 1 << 20

// --- the conformance suite

func TestConformance(t *testing.T) {
	url, conn := admin(t)
	brokertest.Run(t, brokertest.Harness{
		Name: "amqpbroker",
		New: func(t *testing.T, topic string) (broker.Broker, brokertest.Receiver) {
			r := declareQueue(t, conn, "", topic, topic)
			return dial(t, url, amqpbroker.Config{MaxMessage: testMax, ConnectionName: uniqueName("outbox-conformance")}), r
		},
		MaxPayload: testMax,
		Transport:  broker.AMQP,
		AddTopic: func(t *testing.T, _ broker.Broker, topic string) brokertest.Receiver {
			return declareQueue(t, conn, "", topic, topic)
		},
	})
}

// --- RabbitMQ-specific behaviour

// TestUnroutableIsRetryable: an event no queue receives is returned by
// RabbitMQ (mandatory); it is never counted as sent, its error is
// transient (the queue may come) and says what the relay does with it; its
// neighbours are confirmed; once the queue exists the same event goes
// through.
func TestUnroutableIsRetryable(t *testing.T) {
	t.Parallel()
	url, conn := admin(t)
	covered := uniqueName("covered")
	r := declareQueue(t, conn, "", covered, covered)
	b := dial(t, url, amqpbroker.Config{})

	missing := uniqueName("noqueue")
	events := []outbox.Event{event(covered, 0), event(missing, 1), event(covered, 2)}
	events[1].Key = "other"
	res := b.Publish(ctxFor(t, 10*time.Second), events)
	if res[0] != nil || res[2] != nil {
		t.Fatalf("events with a queue failed: %v, %v", res[0], res[2])
	}
	err := res[1]
	switch {
	case err == nil:
		t.Fatal("an unroutable event was confirmed")
	case broker.IsPermanent(err) || errors.Is(err, broker.ErrUnavailable):
		t.Fatalf("unroutable: %v; want a plain transient error (retried, counted)", err)
	case !errors.Is(err, amqpbroker.ErrUnroutable):
		t.Fatalf("unroutable: %v; want it to wrap ErrUnroutable", err)
	}
	for _, want := range []string{"unroutable", "312 NO_ROUTE", missing, "DEAD", "outbox broker setup"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	for i, want := range []outbox.Event{events[0], events[2]} {
		m, err := r.Next(ctxFor(t, 10*time.Second))
		if err != nil || m.EventID != want.EventID {
			t.Fatalf("message %d: %+v, %v; want event %s", i, m, err, want.EventID)
		}
	}

	// The queue appears; the retry goes through.
	r2 := declareQueue(t, conn, "", missing, missing)
	if res := b.Publish(ctxFor(t, 10*time.Second), events[1:2]); res[0] != nil {
		t.Fatalf("after the queue was declared: %v", res[0])
	}
	if m, err := r2.Next(ctxFor(t, 10*time.Second)); err != nil || m.EventID != events[1].EventID {
		t.Fatalf("retried event: %+v, %v", m, err)
	}
}

// TestManyUnroutableAmongRoutable: returns are tied to the right events in
// a large batch mixing routable and unroutable events.
func TestManyUnroutableAmongRoutable(t *testing.T) {
	t.Parallel()
	url, conn := admin(t)
	covered := uniqueName("covered")
	r := declareQueue(t, conn, "", covered, covered)
	b := dial(t, url, amqpbroker.Config{})
	missing := uniqueName("noqueue")
	events := make([]outbox.Event, 600)
	for i := range events {
		topic := covered
		if i%3 == 1 {
			topic = missing
		}
		events[i] = event(topic, i)
		events[i].Key = fmt.Sprint("k", i)
	}
	res := b.Publish(ctxFor(t, 20*time.Second), events)
	var want []string
	for i, err := range res {
		if (i%3 == 1) != errors.Is(err, amqpbroker.ErrUnroutable) {
			t.Fatalf("event %d on %s: %v", i, events[i].Topic, err)
		}
		if i%3 != 1 {
			if err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
			want = append(want, events[i].EventID)
		}
	}
	for i, id := range want {
		m, err := r.Next(ctxFor(t, 10*time.Second))
		if err != nil || m.EventID != id {
			t.Fatalf("message %d: %s, %v; want %s", i, m.EventID, err, id)
		}
	}
}

// TestExchangeFromURL: ?exchange= names the exchange; the topic is the
// routing key; a missing exchange fails Dial with the fix.
func TestExchangeFromURL(t *testing.T) {
	t.Parallel()
	url, conn := admin(t)
	ex := uniqueName("outbox_ex")
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(ex, "topic", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.ExchangeDelete(ex, false, false); _ = ch.Close() })
	q := uniqueName("bound")
	r := declareQueue(t, conn, ex, q, "orders.*")

	b := dial(t, url+"?exchange="+ex+"&heartbeat=5", amqpbroker.Config{})
	if b.Exchange() != ex {
		t.Fatalf("Exchange() = %q, want %q", b.Exchange(), ex)
	}
	events := []outbox.Event{event("orders.paid", 0), event("invoices.sent", 1)}
	res := b.Publish(ctxFor(t, 10*time.Second), events)
	if res[0] != nil {
		t.Fatalf("routed event: %v", res[0])
	}
	if !errors.Is(res[1], amqpbroker.ErrUnroutable) || !strings.Contains(res[1].Error(), fmt.Sprintf("exchange %q", ex)) {
		t.Fatalf("unbound routing key: %v; want unroutable naming the exchange", res[1])
	}
	d, err := r.next(ctxFor(t, 10*time.Second))
	if err != nil || d.Exchange != ex || d.RoutingKey != "orders.paid" || d.MessageId != events[0].EventID {
		t.Fatalf("delivery %+v, %v", d, err)
	}

	_, err = amqpbroker.Dial(url+"?exchange=nope_"+ex, amqpbroker.Config{})
	if err == nil || !strings.Contains(err.Error(), "NOT_FOUND") || !strings.Contains(err.Error(), "declare it first") {
		t.Fatalf("Dial with a missing exchange: %v", err)
	}
}

// TestMappingThroughInbox: what a consumer gets with amqp091-go and
// inbox/amqpmsg: properties, CloudEvents attributes, user headers.
func TestMappingThroughInbox(t *testing.T) {
	t.Parallel()
	url, conn := admin(t)
	q := uniqueName("mapping")
	r := declareQueue(t, conn, "", q, q)
	b := dial(t, url, amqpbroker.Config{Source: "/billing service"})
	e := event(q, 0)
	e.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.FixedZone("CET", 3600))
	e.Key, e.Type, e.AggregateType, e.SchemaVersion = "order 42 ü", "OrderPaid", "Order", 3
	e.ContentType = "text/plain; charset=utf-8"
	e.Headers = map[string]string{"tenant": "acme", "X-Request-Id": "r-1", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	if res := b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{e}); res[0] != nil {
		t.Fatal(res[0])
	}
	d, err := r.next(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if d.DeliveryMode != amqp.Persistent || d.MessageId != e.EventID || d.Type != "OrderPaid" ||
		d.ContentType != e.ContentType || !d.Timestamp.Equal(e.CreatedAt.Truncate(time.Second)) {
		t.Errorf("properties: mode %d, id %q, type %q, content type %q, timestamp %v", d.DeliveryMode, d.MessageId, d.Type, d.ContentType, d.Timestamp)
	}
	wantHeaders := map[string]string{
		"cloudEvents:id": e.EventID, "cloudEvents:source": "/billing service", "cloudEvents:specversion": "1.0",
		"cloudEvents:type": "OrderPaid", "cloudEvents:time": "2026-01-02T02:04:05.6Z", "cloudEvents:partitionkey": "order 42 ü",
		"cloudEvents:schemaversion": "3", "cloudEvents:aggregatetype": "Order",
		"tenant": "acme", "X-Request-Id": "r-1", "traceparent": e.Headers["traceparent"],
	}
	for k, v := range wantHeaders {
		if d.Headers[k] != v {
			t.Errorf("header %s = %v, want %q", k, d.Headers[k], v)
		}
	}
	if len(d.Headers) != len(wantHeaders) {
		t.Errorf("headers %v; want exactly %v", d.Headers, wantHeaders)
	}
	m, err := amqpmsg.FromDelivery(d)
	if err != nil {
		t.Fatal(err)
	}
	if m.EventID != e.EventID || m.Type != e.Type || m.Key != e.Key || m.SchemaVersion != 3 || m.AggregateType != "Order" ||
		m.Source != "/billing service" || m.ContentType != e.ContentType || !m.Time.Equal(e.CreatedAt) || m.Topic != q ||
		string(m.Payload) != string(e.Payload) || len(m.Headers) != 3 || m.Headers["X-Request-Id"] != "r-1" {
		t.Errorf("inbox message %+v", m)
	}
}

// closeConnection closes, with rabbitmqctl, the one connection whose
// connection_name client property is name (other tests share the server),
// and fails the test unless there is exactly one. rabbitmqctl's table
// lists a connection's pid and its client properties as
// <rabbit@host.1.2.0>	[{"connection_name","NAME"},…].
func closeConnection(t *testing.T, name string) {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "-q", "list_connections", "pid", "client_properties").Output()
	if err != nil {
		t.Fatalf("rabbitmqctl list_connections: %v (rabbitmqctl must run on the RabbitMQ host for this test)", err)
	}
	var ours []string
	for _, line := range strings.Split(string(out), "\n") {
		pid, props, ok := strings.Cut(line, "\t")
		if ok && strings.Contains(props, `{"connection_name","`+name+`"}`) {
			ours = append(ours, pid)
		}
	}
	if len(ours) != 1 {
		t.Fatalf("%d connections named %q: %v\n%s", len(ours), name, ours, out)
	}
	if out, err := exec.Command("rabbitmqctl", "-q", "close_connection", ours[0], "closed by amqpbroker test").CombinedOutput(); err != nil {
		t.Fatalf("rabbitmqctl close_connection %q: %v: %s", ours[0], err, out)
	}
}

// TestOwnConnectionClosedMidStream: rabbitmqctl closes the adapter's own
// connection while batches are in flight. No event is reported confirmed
// unless it is in the queue; the unconfirmed ones fail as ErrUnavailable
// (not counted as sent, not permanent); the Broker reconnects by itself
// and the same Broker keeps publishing.
func TestOwnConnectionClosedMidStream(t *testing.T) {
	t.Parallel()
	url, conn := admin(t)
	q := uniqueName("killed")
	r := declareQueue(t, conn, "", q, q)
	name := uniqueName("outbox-killed")
	b := dial(t, url, amqpbroker.Config{ConnectionName: name, Timeout: 5 * time.Second})

	var (
		mu        sync.Mutex
		confirmed = map[string]bool{}
		failures  []error
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			events := make([]outbox.Event, 200)
			for j := range events {
				events[j] = event(q, i*200+j)
			}
			res := b.Publish(context.Background(), events)
			mu.Lock()
			for j, err := range res {
				if err == nil {
					confirmed[events[j].EventID] = true
				} else {
					failures = append(failures, err)
				}
			}
			mu.Unlock()
			if res[len(res)-1] != nil {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(confirmed) }
	waitFor("the first confirms", func() bool { return count() >= 400 })
	closeConnection(t, name)
	waitFor("a failure from the closed connection", func() bool { mu.Lock(); defer mu.Unlock(); return len(failures) > 0 })
	after := count()
	waitFor("confirms after the reconnect", func() bool { return count() >= after+400 })
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	for _, err := range failures {
		if broker.IsPermanent(err) || !errors.Is(err, broker.ErrUnavailable) {
			t.Fatalf("failure while the connection was lost: %v; want transient and ErrUnavailable", err)
		}
	}
	t.Logf("%d confirmed, %d failed; first failure: %v", len(confirmed), len(failures), failures[0])
	// Every confirmed event is in the queue (unconfirmed ones may be too).
	missing := maps(confirmed)
	ctx := ctxFor(t, 30*time.Second)
	for len(missing) > 0 {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("%d confirmed events are not in the queue: %v", len(missing), err)
		}
		delete(missing, m.EventID)
	}
}

func maps(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestNewWithBorrowedConnLeavesItOpen: New publishes on its own channel of
// the caller's connection and Close leaves the connection open.
func TestNewWithBorrowedConnLeavesItOpen(t *testing.T) {
	t.Parallel()
	url, conn := admin(t)
	_ = url
	q := uniqueName("borrowed")
	r := declareQueue(t, conn, "", q, q)
	b, err := amqpbroker.New(conn, amqpbroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := event(q, 0)
	if res := b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{e}); res[0] != nil {
		t.Fatal(res[0])
	}
	if m, err := r.Next(ctxFor(t, 10*time.Second)); err != nil || m.EventID != e.EventID {
		t.Fatalf("%+v, %v", m, err)
	}
	if err := b.Close(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if conn.IsClosed() {
		t.Fatal("Close closed the caller's connection")
	}
	if _, err := amqpbroker.New(nil, amqpbroker.Config{}); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

// TestCheck refuses at enqueue what the Broker would refuse at publish.
func TestCheck(t *testing.T) {
	t.Parallel()
	url, _ := admin(t)
	b := dial(t, url, amqpbroker.Config{MaxMessage: 1000})
	for _, c := range []struct {
		name string
		m    outbox.Message
		want error
	}{
		{"fits", outbox.Message{Topic: "orders", Type: "T", Payload: make([]byte, 500)}, nil},
		{"too large", outbox.Message{Topic: "orders", Type: "T", Payload: make([]byte, 1000)}, outbox.ErrPayloadTooLarge},
		{"long topic", outbox.Message{Topic: strings.Repeat("t", 256), Type: "T"}, outbox.ErrInvalidMessage},
		{"reserved header", outbox.Message{Topic: "orders", Type: "T", Headers: map[string]string{"x-death": "1"}}, outbox.ErrReservedHeader},
		{"long header name", outbox.Message{Topic: "orders", Type: "T", Headers: map[string]string{strings.Repeat("h", 256): "1"}}, outbox.ErrInvalidHeader},
	} {
		err := b.Check(c.m)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: Check = %v, want %v", c.name, err, c.want)
		}
	}
	if f := b.Features(); f.MaxMessage != 1000 || f.Ordering != broker.OrderNone {
		t.Errorf("Features = %+v", f)
	}
}

// TestDialErrorsHideSecrets: a wrong password or a closed port gives an
// error naming the server, never the password.
func TestDialErrorsHideSecrets(t *testing.T) {
	t.Parallel()
	testenv.Require(t, testenv.RabbitMQ)
	for _, c := range []struct{ name, url, says string }{
		{"wrong password", "amqp://guest:S3CRETPW@127.0.0.1:5672/", "username or password not allowed"},
		{"closed port", "amqp://guest:S3CRETPW@127.0.0.1:1/", "127.0.0.1:1"},
		{"bad port", "amqp://guest:S3CRETPW@127.0.0.1:x/", "guest:xxxxx@"},
		{"bad exchange escape", "amqp://guest:S3CRETPW@127.0.0.1:5672/?exchange=%zz", "malformed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := amqpbroker.Dial(c.url, amqpbroker.Config{Timeout: 2 * time.Second})
			if err == nil {
				_ = b.Close(context.Background())
				t.Fatal("Dial succeeded")
			}
			t.Log(err)
			if strings.Contains(err.Error(), "S3CRETPW") {
				t.Errorf("the error shows the password: %v", err)
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Errorf("the error does not say %q: %v", c.says, err)
			}
		})
	}
}

// TestEnsureQueue declares and binds what the relay's topics need,
// idempotently.
func TestEnsureQueue(t *testing.T) {
	t.Parallel()
	url, conn := admin(t)
	ex := uniqueName("setup_ex")
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(ex, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q := uniqueName("setup_q")
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(q, false, false, false)
		_ = ch.ExchangeDelete(ex, false, false)
		_ = ch.Close()
	})
	b := dial(t, url+"?exchange="+ex, amqpbroker.Config{})
	for range 2 {
		if err := b.EnsureQueue(ctxFor(t, 10*time.Second), q, []string{"orders", "invoices"}); err != nil {
			t.Fatal(err)
		}
	}
	res := b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{event("orders", 0), event("invoices", 1)})
	if res[0] != nil || res[1] != nil {
		t.Fatalf("after EnsureQueue: %v", res)
	}
	if qi, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil || qi.Messages != 2 {
		t.Fatalf("queue %s: %+v, %v", q, qi, err)
	}
	if err := amqpbroker.EnsureQueue(ctxFor(t, 10*time.Second), conn, "", "orders", []string{"invoices"}); err == nil || !strings.Contains(err.Error(), "default exchange") {
		t.Fatalf("default exchange with another topic: %v", err)
	}
}

// TestSetupDeclaresTheExchange: Setup creates a missing exchange (a topic
// exchange, so a binding may use wildcards), the queue and its bindings,
// idempotently, so that a Broker can then be dialled on that URL and its
// events land in the queue; an existing exchange of another kind is kept.
func TestSetupDeclaresTheExchange(t *testing.T) {
	t.Parallel()
	url, conn := admin(t)
	ex, q := uniqueName("setup_new_ex"), uniqueName("setup_new_q")
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(q, false, false, false)
		_ = ch.ExchangeDelete(ex, false, false)
		_ = ch.Close()
	})
	if _, err := amqpbroker.Dial(url+"?exchange="+ex, amqpbroker.Config{}); err == nil || !strings.Contains(err.Error(), "outbox broker setup") {
		t.Fatalf("Dial before the exchange exists: %v", err)
	}
	for range 2 {
		got, err := amqpbroker.Setup(ctxFor(t, 10*time.Second), url+"?exchange="+ex, q, []string{"orders.#"})
		if err != nil || got != ex {
			t.Fatalf("Setup: %q, %v", got, err)
		}
	}
	b := dial(t, url+"?exchange="+ex, amqpbroker.Config{})
	res := b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{event("orders.paid", 0), event("orders.shipped", 1)})
	if res[0] != nil || res[1] != nil {
		t.Fatalf("after Setup: %v", res)
	}
	if qi, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil || qi.Messages != 2 {
		t.Fatalf("queue %s: %+v, %v", q, qi, err)
	}

	direct, q2 := uniqueName("setup_direct_ex"), uniqueName("setup_direct_q")
	if err := ch.ExchangeDeclare(direct, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(q2, false, false, false); _ = ch.ExchangeDelete(direct, false, false) })
	if _, err := amqpbroker.Setup(ctxFor(t, 10*time.Second), url+"?exchange="+direct, q2, []string{"orders"}); err != nil {
		t.Fatalf("Setup on an existing direct exchange: %v", err)
	}
}

// TestBlackholeKeepsTheDeadline: a network that stops carrying bytes (a
// proxy that holds them) neither confirms anything nor holds a Publish
// past its deadline, even when the batch is too large for the socket
// buffers (amqp091-go's writes have no deadline of their own); once the
// network is back the same Broker publishes again.
func TestBlackholeKeepsTheDeadline(t *testing.T) {
	t.Parallel()
	url, conn := admin(t)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	q := uniqueName("blackhole")
	r := declareQueue(t, conn, "", q, q)
	u.Host = proxy.Addr()
	b := dial(t, u.String(), amqpbroker.Config{Timeout: 2 * time.Second})
	if res := b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{event(q, 0)}); res[0] != nil {
		t.Fatal(res[0])
	}

	proxy.Pause()
	big := make([]outbox.Event, 24)
	for i := range big {
		big[i] = event(q, i+1)
		big[i].Key = fmt.Sprint("k", i)
		big[i].Payload = make([]byte, 1<<20)
	}
	start := time.Now()
	res := b.Publish(ctxFor(t, 60*time.Second), big)
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("Publish into a blackhole took %v with a 2s Timeout", d)
	}
	for i, err := range res {
		if err == nil || broker.IsPermanent(err) {
			t.Fatalf("event %d into a blackhole: %v; want a transient error", i, err)
		}
	}
	t.Logf("into the blackhole: %v", res[0])
	proxy.Resume()

	deadline := time.Now().Add(20 * time.Second)
	e := event(q, 99)
	for {
		res := b.Publish(ctxFor(t, 5*time.Second), []outbox.Event{e})
		if res[0] == nil {
			break
		}
		if broker.IsPermanent(res[0]) || time.Now().After(deadline) {
			t.Fatalf("after the network came back: %v", res[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctx := ctxFor(t, 30*time.Second)
	for {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("the event sent after the blackhole did not arrive: %v", err)
		}
		if m.EventID == e.EventID {
			break
		}
	}
}

// TestMaxPendingSmallerThanTheBatches: concurrent batches larger than the
// window all go through, in order, each event confirmed once.
func TestMaxPendingSmallerThanTheBatches(t *testing.T) {
	t.Parallel()
	url, conn := admin(t)
	q := uniqueName("window")
	r := declareQueue(t, conn, "", q, q)
	b := dial(t, url, amqpbroker.Config{MaxPending: 7})
	var wg sync.WaitGroup
	sent := make([][]outbox.Event, 3)
	for g := range sent {
		for i := range 100 {
			e := event(q, g*1000+i)
			e.Key = fmt.Sprint("g", g)
			sent[g] = append(sent[g], e)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, err := range b.Publish(ctxFor(t, 30*time.Second), sent[g]) {
				if err != nil {
					t.Errorf("goroutine %d, event %d: %v", g, i, err)
				}
			}
		}()
	}
	wg.Wait()
	next := map[string]int{}
	for range 300 {
		m, err := r.Next(ctxFor(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var g int
		fmt.Sscanf(m.Key, "g%d", &g)
		if want := sent[g][next[m.Key]]; m.EventID != want.EventID {
			t.Fatalf("key %s: got %s, want %s", m.Key, m.EventID, want.EventID)
		}
		next[m.Key]++
	}
	if _, err := amqpbroker.Dial(url, amqpbroker.Config{MaxPending: -1}); err == nil {
		t.Error("MaxPending -1 accepted")
	}
}
