package mqttbroker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"go.uber.org/goleak"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/brokertest"
	"github.com/outbox-go/outbox/broker/mqttbroker"
	"github.com/outbox-go/outbox/inbox/mqttmsg"
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

// server returns the Mosquitto URL and its host:port.
func server(t *testing.T) (string, string) {
	t.Helper()
	raw := testenv.Require(t, testenv.MQTT)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return raw, u.Host
}

func dial(t *testing.T, url string, cfg mqttbroker.Config) *mqttbroker.Broker {
	t.Helper()
	b, err := mqttbroker.Dial(url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

// connectClient connects a paho client of the test's own, disconnected
// when the test ends; onPublish, when set, receives what it is sent.
func connectClient(t *testing.T, addr string, onPublish func(*paho.Publish)) *paho.Client {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		testenv.Unavailable(t, testenv.MQTT, err)
	}
	cfg := paho.ClientConfig{ClientID: uniqueName("outbox-test"), Conn: conn}
	if onPublish != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			onPublish(pr.Packet)
			return true, nil
		}}
	}
	c := paho.NewClient(cfg)
	if _, err := c.Connect(ctxFor(t, 10*time.Second), &paho.Connect{ClientID: cfg.ClientID, KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatalf("connect test client: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Disconnect(&paho.Disconnect{})
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
		}
	})
	return c
}

// subscriber reads, in arrival order, what Mosquitto forwards on one topic
// to a QoS 1 subscription of the test's own.
type subscriber struct {
	msgs chan *paho.Publish
}

func subscribe(t *testing.T, addr, topic string) *subscriber {
	t.Helper()
	s := &subscriber{msgs: make(chan *paho.Publish, 100000)}
	c := connectClient(t, addr, func(p *paho.Publish) { s.msgs <- p })
	if _, err := c.Subscribe(ctxFor(t, 10*time.Second), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}}); err != nil {
		t.Fatalf("subscribe %s: %v", topic, err)
	}
	return s
}

func (s *subscriber) next(ctx context.Context) (*paho.Publish, error) {
	select {
	case p := <-s.msgs:
		return p, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *subscriber) Next(ctx context.Context) (brokertest.Received, error) {
	p, err := s.next(ctx)
	if err != nil {
		return brokertest.Received{}, err
	}
	r := brokertest.Received{Topic: p.Topic, Payload: p.Payload, Headers: map[string]string{}}
	if p.Properties != nil {
		r.EventID = p.Properties.User.Get(broker.AttrID)
		r.Type = p.Properties.User.Get(broker.AttrType)
		r.Key = p.Properties.User.Get(broker.AttrPartitionKey)
		for _, up := range p.Properties.User {
			if _, ok := r.Headers[up.Key]; !ok {
				r.Headers[up.Key] = up.Value
			}
		}
	}
	return r, nil
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
	url, addr := server(t)
	brokertest.Run(t, brokertest.Harness{
		Name: "mqttbroker",
		New: func(t *testing.T, topic string) (broker.Broker, brokertest.Receiver) {
			s := subscribe(t, addr, topic)
			return dial(t, url, mqttbroker.Config{MaxMessage: testMax}), s
		},
		MaxPayload: testMax,
		Transport:  broker.MQTT,
		AddTopic: func(t *testing.T, _ broker.Broker, topic string) brokertest.Receiver {
			return subscribe(t, addr, topic)
		},
	})
}

// --- MQTT-specific behaviour

// TestMappingThroughInbox: what a consumer gets with paho and
// inbox/mqttmsg: the Content Type property, the CloudEvents attributes as
// user properties, the user headers.
func TestMappingThroughInbox(t *testing.T) {
	t.Parallel()
	url, addr := server(t)
	topic := uniqueName("outbox/mapping")
	s := subscribe(t, addr, topic)
	b := dial(t, url, mqttbroker.Config{Source: "/billing service"})
	e := event(topic, 0)
	e.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.FixedZone("CET", 3600))
	e.Key, e.Type, e.AggregateType, e.SchemaVersion = "order 42 ü", "OrderPaid", "Order", 3
	e.ContentType = "text/plain; charset=utf-8"
	e.Headers = map[string]string{"tenant": "acme", "X-Request-Id": "r-1"}
	if res := b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{e}); res[0] != nil {
		t.Fatal(res[0])
	}
	p, err := s.next(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if p.QoS != 1 || p.Retain || p.Properties.ContentType != e.ContentType {
		t.Errorf("PUBLISH: QoS %d, retain %v, content type %q", p.QoS, p.Retain, p.Properties.ContentType)
	}
	want := paho.UserProperties{{Key: "id", Value: e.EventID}, {Key: "source", Value: "/billing service"}, {Key: "specversion", Value: "1.0"},
		{Key: "type", Value: "OrderPaid"}, {Key: "time", Value: "2026-01-02T02:04:05.6Z"}, {Key: "partitionkey", Value: "order 42 ü"},
		{Key: "schemaversion", Value: "3"}, {Key: "aggregatetype", Value: "Order"}}
	got := p.Properties.User
	if len(got) != len(want)+2 {
		t.Fatalf("user properties %v", got)
	}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("user property %d = %v, want %v", i, got[i], w)
		}
	}
	m, err := mqttmsg.FromPublish(p)
	if err != nil {
		t.Fatal(err)
	}
	if m.EventID != e.EventID || m.Type != e.Type || m.Key != e.Key || m.SchemaVersion != 3 || m.AggregateType != "Order" ||
		m.Source != "/billing service" || m.ContentType != e.ContentType || !m.Time.Equal(e.CreatedAt) || m.Topic != topic ||
		string(m.Payload) != string(e.Payload) || len(m.Headers) != 2 || m.Headers["X-Request-Id"] != "r-1" || m.Headers["tenant"] != "acme" {
		t.Errorf("inbox message %+v", m)
	}
}

// TestNoSubscriberIsSuccess: a PUBACK with 0x10 (no matching subscribers)
// means the server took the message.
func TestNoSubscriberIsSuccess(t *testing.T) {
	t.Parallel()
	url, _ := server(t)
	b := dial(t, url, mqttbroker.Config{})
	for i, err := range b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{event(uniqueName("outbox/nobody"), 0), event(uniqueName("outbox/nobody"), 1)}) {
		if err != nil {
			t.Errorf("event %d: %v", i, err)
		}
	}
}

// TestBadTopicsArePermanent: wildcards, an empty topic, control
// characters are refused, alone, before anything is sent; Check says so
// at enqueue.
func TestBadTopicsArePermanent(t *testing.T) {
	t.Parallel()
	url, addr := server(t)
	good := uniqueName("outbox/good")
	s := subscribe(t, addr, good)
	b := dial(t, url, mqttbroker.Config{})
	bad := []string{"orders/+", "orders/#", "", "a\x00b", "a\x01b", "\xff"}
	events := []outbox.Event{event(good, 0)}
	for i, topic := range bad {
		e := event(topic, i+1)
		e.Key = fmt.Sprint("bad", i)
		events = append(events, e)
	}
	events = append(events, event(good, 99))
	res := b.Publish(ctxFor(t, 10*time.Second), events)
	if res[0] != nil || res[len(res)-1] != nil {
		t.Fatalf("good events: %v, %v", res[0], res[len(res)-1])
	}
	for i := range bad {
		if err := res[i+1]; !broker.IsPermanent(err) || !errors.Is(err, mqttbroker.ErrInvalidTopic) {
			t.Errorf("topic %q: %v; want permanent ErrInvalidTopic", bad[i], err)
		}
		if err := b.Check(outbox.Message{Topic: bad[i], Type: "T"}); !errors.Is(err, mqttbroker.ErrInvalidTopic) {
			t.Errorf("Check(topic %q) = %v", bad[i], err)
		}
	}
	for _, want := range []outbox.Event{events[0], events[len(events)-1]} {
		if p, err := s.next(ctxFor(t, 10*time.Second)); err != nil || p.Properties.User.Get("id") != want.EventID {
			t.Fatalf("good event: %v, %v", p, err)
		}
	}
}

// TestConnectionLostMidStream: a proxy between the Broker and Mosquitto
// resets the connection while batches are in flight. No event is reported
// confirmed unless a subscriber got it; the unconfirmed ones fail as
// ErrUnavailable (not counted, not permanent) at once rather than at the
// deadline; the Broker reconnects by itself and keeps publishing; a
// blackholed connection makes Publish keep its deadline, even with more to
// write than the socket buffers hold, and publishing recovers after it.
func TestConnectionLostMidStream(t *testing.T) {
	t.Parallel()
	_, addr := server(t)
	proxy, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	topic := uniqueName("outbox/killed")
	s := subscribe(t, addr, topic)
	b := dial(t, "mqtt://"+proxy.Addr(), mqttbroker.Config{Timeout: 5 * time.Second, KeepAlive: 2 * time.Second})

	var (
		mu        sync.Mutex
		confirmed = map[string]bool{}
		failures  []error
		slowest   time.Duration
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
			events := make([]outbox.Event, 100)
			for j := range events {
				events[j] = event(topic, i*100+j)
				events[j].Key = fmt.Sprint("k", j%10)
			}
			start := time.Now()
			res := b.Publish(context.Background(), events)
			d := time.Since(start)
			mu.Lock()
			for j, err := range res {
				if err == nil {
					confirmed[events[j].EventID] = true
				} else {
					failures = append(failures, err)
				}
			}
			if res[0] != nil {
				slowest = max(slowest, d)
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
			time.Sleep(5 * time.Millisecond)
		}
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(confirmed) }
	waitFor("the first PUBACKs", func() bool { return count() >= 300 })
	if n := proxy.ResetAll(); n != 1 {
		t.Fatalf("reset %d connections, want 1", n)
	}
	waitFor("a failure from the reset connection", func() bool { mu.Lock(); defer mu.Unlock(); return len(failures) > 0 })
	after := count()
	waitFor("PUBACKs after the reconnect", func() bool { return count() >= after+300 })
	close(stop)
	wg.Wait()

	mu.Lock()
	for _, err := range failures {
		if broker.IsPermanent(err) || !errors.Is(err, broker.ErrUnavailable) {
			t.Fatalf("failure while the connection was lost: %v; want transient and ErrUnavailable", err)
		}
	}
	if slowest > 3*time.Second {
		t.Errorf("a Publish that lost its connection took %v: it must fail when the connection goes, not at the deadline", slowest)
	}
	t.Logf("%d confirmed, %d failed; first failure: %v", len(confirmed), len(failures), failures[0])
	missing := make(map[string]bool, len(confirmed))
	for id := range confirmed {
		missing[id] = true
	}
	mu.Unlock()
	ctx := ctxFor(t, 30*time.Second)
	for len(missing) > 0 {
		p, err := s.next(ctx)
		if err != nil {
			t.Fatalf("%d confirmed events never reached the subscriber: %v", len(missing), err)
		}
		delete(missing, p.Properties.User.Get("id"))
	}

	// A blackhole: no PUBACK comes, nothing says the connection is gone.
	// More than the socket buffers hold, so that paho's writes block.
	proxy.Pause()
	big := make([]outbox.Event, 24)
	for i := range big {
		big[i] = event(topic, i+1)
		big[i].Payload = make([]byte, 1<<20)
	}
	start := time.Now()
	res := b.Publish(ctxFor(t, 60*time.Second), big)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("blackholed Publish took %v; want its 5s deadline (or sooner, when keep-alive gives up)", d)
	}
	for i, err := range res {
		if err == nil || broker.IsPermanent(err) {
			t.Fatalf("blackholed event %d: %v; want a transient error", i, err)
		}
	}
	proxy.Resume()
	deadline := time.Now().Add(20 * time.Second)
	for {
		res := b.Publish(ctxFor(t, 5*time.Second), []outbox.Event{event(topic, 99)})
		if res[0] == nil {
			break
		}
		if broker.IsPermanent(res[0]) || time.Now().After(deadline) {
			t.Fatalf("after the network came back: %v", res[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestNewWithBorrowedClient publishes through the caller's paho client and
// leaves it connected on Close.
func TestNewWithBorrowedClient(t *testing.T) {
	t.Parallel()
	_, addr := server(t)
	topic := uniqueName("outbox/borrowed")
	s := subscribe(t, addr, topic)
	c := connectClient(t, addr, nil)
	b, err := mqttbroker.New(c, mqttbroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := event(topic, 0)
	if res := b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{e}); res[0] != nil {
		t.Fatal(res[0])
	}
	if p, err := s.next(ctxFor(t, 10*time.Second)); err != nil || p.Properties.User.Get("id") != e.EventID {
		t.Fatalf("%v, %v", p, err)
	}
	if err := b.Close(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
		t.Fatal("Close disconnected the caller's client")
	default:
	}
	if _, err := mqttbroker.New(nil, mqttbroker.Config{}); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

// TestCheck refuses at enqueue what the Broker would refuse at publish.
func TestCheck(t *testing.T) {
	t.Parallel()
	url, _ := server(t)
	b := dial(t, url, mqttbroker.Config{MaxMessage: 1000})
	for _, c := range []struct {
		name string
		m    outbox.Message
		want error
	}{
		{"fits", outbox.Message{Topic: "orders", Type: "T", Payload: make([]byte, 500)}, nil},
		{"too large", outbox.Message{Topic: "orders", Type: "T", Payload: make([]byte, 1000)}, outbox.ErrPayloadTooLarge},
		{"wildcard", outbox.Message{Topic: "orders/#", Type: "T"}, mqttbroker.ErrInvalidTopic},
		{"reserved header", outbox.Message{Topic: "orders", Type: "T", Headers: map[string]string{"Source": "me"}}, outbox.ErrReservedHeader},
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

// TestDialErrors: an unreachable server or a bad URL give an error naming
// the server, never the password.
func TestDialErrors(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	for _, c := range []struct{ name, url, says string }{
		{"closed port", "mqtt://relay:S3CRETPW@" + closed, closed},
		{"bad scheme", "mqtx://relay:S3CRETPW@" + closed, "mqtt:// or mqtts://"},
		{"bad escape", "mqtt://relay:S3CRET%zz@" + closed, "relay:xxxxx@"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := mqttbroker.Dial(c.url, mqttbroker.Config{Timeout: 2 * time.Second})
			if err == nil {
				_ = b.Close(context.Background())
				t.Fatal("Dial succeeded")
			}
			t.Log(err)
			if strings.Contains(err.Error(), "S3CRET") {
				t.Errorf("the error shows the password: %v", err)
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Errorf("the error does not say %q: %v", c.says, err)
			}
		})
	}
}

// TestBlackholedWritesKeepTheDeadline: with a keep-alive far longer than
// the deadline, a batch larger than the socket buffers into a network that
// carries nothing still returns by the deadline (paho's writes have none
// of their own), and the Broker reconnects once the network is back.
func TestBlackholedWritesKeepTheDeadline(t *testing.T) {
	t.Parallel()
	_, addr := server(t)
	proxy, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	topic := uniqueName("outbox/blackhole")
	b := dial(t, "mqtt://"+proxy.Addr(), mqttbroker.Config{Timeout: 2 * time.Second, KeepAlive: time.Minute})
	if res := b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{event(topic, 0)}); res[0] != nil {
		t.Fatal(res[0])
	}
	proxy.Pause()
	big := make([]outbox.Event, 24)
	for i := range big {
		big[i] = event(topic, i+1)
		big[i].Payload = make([]byte, 1<<20)
	}
	start := time.Now()
	res := b.Publish(ctxFor(t, 60*time.Second), big)
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("blackholed Publish took %v with a 2s Timeout", d)
	}
	for i, err := range res {
		if err == nil || broker.IsPermanent(err) {
			t.Fatalf("blackholed event %d: %v; want a transient error", i, err)
		}
	}
	proxy.Resume()
	deadline := time.Now().Add(20 * time.Second)
	for {
		res := b.Publish(ctxFor(t, 5*time.Second), []outbox.Event{event(topic, 99)})
		if res[0] == nil {
			break
		}
		if broker.IsPermanent(res[0]) || time.Now().After(deadline) {
			t.Fatalf("after the network came back: %v", res[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
}
