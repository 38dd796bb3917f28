package rocketmqbroker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	rmqerrors "github.com/apache/rocketmq-client-go/v2/errors"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/rocketmqbroker"
)

// No RocketMQ server runs here: these tests hold the adapter to its
// mapping and its error classification with a fake Sender, which answers
// what rocketmq-client-go returns (its SendResult, or the error texts it
// builds from the broker's response codes).

// fakeSender records every message and answers with fn.
type fakeSender struct {
	mu   sync.Mutex
	sent []*primitive.Message
	fn   func(m *primitive.Message, n int) (*primitive.SendResult, error)
	busy chan struct{} // when set, each send waits for a token
}

func (f *fakeSender) SendSync(ctx context.Context, msgs ...*primitive.Message) (*primitive.SendResult, error) {
	if f.busy != nil {
		select {
		case <-f.busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	f.sent = append(f.sent, msgs...)
	n := len(f.sent)
	f.mu.Unlock()
	if f.fn != nil {
		return f.fn(msgs[0], n)
	}
	return ok(n), nil
}

func ok(n int) *primitive.SendResult {
	return &primitive.SendResult{Status: primitive.SendOK, MessageQueue: &primitive.MessageQueue{Topic: "t", BrokerName: "broker-a", QueueId: n % 4}, QueueOffset: int64(n)}
}

func event(topic, key string, i int) outbox.Event {
	return outbox.Event{ID: int64(i + 1), CreatedAt: time.Now(), Message: outbox.Message{
		EventID: outbox.NewEventID(), Topic: topic, Key: key, Type: "T", SchemaVersion: 1,
		ContentType: outbox.DefaultContentType, Payload: fmt.Appendf(nil, `{"n":%d}`, i),
	}}
}

func newBroker(t *testing.T, s rocketmqbroker.Sender, cfg rocketmqbroker.Config) *rocketmqbroker.Broker {
	t.Helper()
	b, err := rocketmqbroker.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

func TestMessageMapping(t *testing.T) {
	f := &fakeSender{}
	b := newBroker(t, f, rocketmqbroker.Config{Source: "/billing service"})
	e := event("orders_paid", "order 42 ü", 0)
	e.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.FixedZone("CET", 3600))
	e.Type = "OrderPaid"
	e.AggregateType = "Order"
	e.SchemaVersion = 3
	e.ContentType = "application/json; charset=utf-8"
	e.Headers = map[string]string{"traceparent": "00-abc-def-01", "Tenant": "acme ✓", "x-death": "kept", "ce-type_other": "x"}
	delete(e.Headers, "ce-type_other")
	res := b.PublishResults(context.Background(), []outbox.Event{e})
	if res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	if res[0].Partition != 1 || res[0].Offset != 1 || res[0].Stream != "broker-a" {
		t.Errorf("result %+v; want queue 1, offset 1 of broker-a", res[0])
	}
	m := f.sent[0]
	if m.Topic != "orders_paid" || string(m.Body) != string(e.Payload) || m.GetKeys() != e.EventID || m.GetShardingKey() != e.Key {
		t.Errorf("message topic %q body %q keys %q sharding key %q", m.Topic, m.Body, m.GetKeys(), m.GetShardingKey())
	}
	want := map[string]string{
		"CE_id": e.EventID, "CE_source": "/billing service", "CE_specversion": "1.0", "CE_type": "OrderPaid",
		"CE_time": "2026-01-02T02:04:05.6Z", "CE_datacontenttype": "application/json; charset=utf-8",
		"CE_schemaversion": "3", "CE_aggregatetype": "Order",
		"traceparent": "00-abc-def-01", "Tenant": "acme ✓", "x-death": "kept",
		primitive.PropertyKeys: e.EventID, primitive.PropertyShardingKey: e.Key,
	}
	got := m.GetProperties()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("properties:\n got %v\nwant %v", got, want)
	}
	// A keyless event has no sharding key: the hash selector picks any queue.
	k := event("orders_paid", "", 1)
	if res := b.Publish(context.Background(), []outbox.Event{k}); res[0] != nil {
		t.Fatal(res[0])
	}
	if sk := f.sent[1].GetShardingKey(); sk != "" {
		t.Errorf("keyless event sent with sharding key %q", sk)
	}
}

// rocketmq-client-go's hash queue selector, which Dial installs, maps a
// sharding key to one queue, always the same: what the per-key order
// rests on.
func TestHashQueueSelectorKeepsAKeyOnOneQueue(t *testing.T) {
	sel := producer.NewHashQueueSelector()
	var queues []*primitive.MessageQueue
	for i := range 8 {
		queues = append(queues, &primitive.MessageQueue{Topic: "t", BrokerName: "b", QueueId: i})
	}
	used := map[int]bool{}
	for k := range 50 {
		m := primitive.NewMessage("t", []byte("x"))
		m.WithShardingKey(fmt.Sprintf("order-%d", k))
		q := sel.Select(m, queues, "")
		for range 5 {
			if again := sel.Select(m, queues, "broker-that-failed"); again.QueueId != q.QueueId {
				t.Fatalf("key order-%d on queues %d and %d", k, q.QueueId, again.QueueId)
			}
		}
		used[q.QueueId] = true
	}
	if len(used) < 4 {
		t.Errorf("50 keys on only %d of 8 queues", len(used))
	}
}

// A key's events go one after another, in order; when one fails its later
// events are not sent (ErrNotAttempted, not permanent), and other keys go
// on. Different keys are sent in parallel.
func TestOrderPerKeyAndNotAttemptedAfterAFailure(t *testing.T) {
	var mu sync.Mutex
	perKey := map[string][]string{}
	inFlight, peak := 0, 0
	f := &fakeSender{}
	f.fn = func(m *primitive.Message, n int) (*primitive.SendResult, error) {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		perKey[m.GetShardingKey()] = append(perKey[m.GetShardingKey()], string(m.Body))
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
		if string(m.Body) == "a#2" {
			return nil, errors.New("CODE: 2, DESC: [TIMEOUT_CLEAN_QUEUE]broker busy")
		}
		return ok(n), nil
	}
	b := newBroker(t, f, rocketmqbroker.Config{})
	var events []outbox.Event
	for i := 1; i <= 4; i++ {
		for _, k := range []string{"a", "b", "c", "d"} {
			e := event("t", k, i)
			e.Payload = fmt.Appendf(nil, "%s#%d", k, i)
			events = append(events, e)
		}
	}
	res := b.Publish(context.Background(), events)
	for i, e := range events {
		err := res[i]
		switch p := string(e.Payload); {
		case p == "a#1", e.Key != "a":
			if err != nil {
				t.Errorf("%s: %v", p, err)
			}
		case p == "a#2":
			if err == nil || broker.IsPermanent(err) || errors.Is(err, broker.ErrNotAttempted) {
				t.Errorf("a#2: %v; want a transient error", err)
			}
		default: // a#3, a#4
			if !errors.Is(err, broker.ErrNotAttempted) || broker.IsPermanent(err) {
				t.Errorf("%s: %v; want broker.ErrNotAttempted", p, err)
			}
		}
	}
	for k, got := range perKey {
		want := []string{k + "#1", k + "#2", k + "#3", k + "#4"}
		if k == "a" {
			want = want[:2]
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("key %s sent %v, want %v", k, got, want)
		}
	}
	if peak < 2 {
		t.Errorf("at most %d send in flight; different keys should go in parallel", peak)
	}
	if f := b.Features(); f.Ordering != broker.OrderKey || f.MaxMessage != rocketmqbroker.DefaultMaxMessage {
		t.Errorf("Features = %+v", f)
	}
}

func TestErrorClassification(t *testing.T) {
	cases := []struct {
		name        string
		res         *primitive.SendResult
		err         error
		permanent   bool
		unavailable bool
		is          error
		says        string
	}{
		{"topic not exist (17)", nil, errors.New("CODE: 17, DESC: topic[orders] not exist, apply first please!"), true, false, rocketmqbroker.ErrTopicNotFound, "mqadmin updateTopic"},
		{"client topic not exist", nil, rmqerrors.ErrTopicNotExist, true, false, rocketmqbroker.ErrTopicNotFound, "does not exist"},
		{"message illegal (13)", nil, errors.New("CODE: 13, DESC: the message body size over max value, MAX: 4194304"), true, false, nil, "illegal"},
		{"broker error type", nil, primitive.MQBrokerErr{ResponseCode: 17, ErrorMessage: "topic not exist"}, true, false, rocketmqbroker.ErrTopicNotFound, ""},
		{"system busy (2)", nil, errors.New("CODE: 2, DESC: broker busy"), false, false, nil, "busy"},
		{"service not available (14)", nil, errors.New("CODE: 14, DESC: service not available now"), false, false, nil, "busy or unavailable"},
		{"no permission (16)", nil, errors.New("CODE: 16, DESC: the broker[b] sending message is forbidden"), false, false, nil, "grant it"},
		{"no route", nil, errors.New("the topic=orders route info not found"), false, false, nil, "mqadmin updateTopic"},
		{"not running", nil, rmqerrors.ErrNotRunning, false, true, broker.ErrUnavailable, "not running"},
		{"flush disk timeout", &primitive.SendResult{Status: primitive.SendFlushDiskTimeout}, nil, false, false, nil, "FLUSH_DISK_TIMEOUT"},
		{"slave not available", &primitive.SendResult{Status: primitive.SendSlaveNotAvailable}, nil, false, false, nil, "SLAVE_NOT_AVAILABLE"},
		{"no result", nil, nil, false, false, nil, "no result"},
		{"remoting error", nil, primitive.NewRemotingErr("connect to 10.0.0.1:10911 failed"), false, false, nil, "not confirmed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeSender{fn: func(*primitive.Message, int) (*primitive.SendResult, error) { return c.res, c.err }}
			b := newBroker(t, f, rocketmqbroker.Config{})
			err := b.Publish(context.Background(), []outbox.Event{event("orders", "k", 0)})[0]
			switch {
			case err == nil:
				t.Fatal("confirmed")
			case broker.IsPermanent(err) != c.permanent:
				t.Errorf("%v: permanent = %v, want %v", err, broker.IsPermanent(err), c.permanent)
			case errors.Is(err, broker.ErrUnavailable) != c.unavailable:
				t.Errorf("%v: unavailable = %v, want %v", err, !c.unavailable, c.unavailable)
			case c.is != nil && !errors.Is(err, c.is):
				t.Errorf("%v: does not wrap %v", err, c.is)
			case !strings.Contains(err.Error(), c.says):
				t.Errorf("%v: does not say %q", err, c.says)
			}
		})
	}
}

// What the adapter refuses before sending, each alone and permanent, the
// events around it sent.
func TestRefusedBeforeSending(t *testing.T) {
	f := &fakeSender{}
	b := newBroker(t, f, rocketmqbroker.Config{MaxMessage: 10_000})
	cases := map[string]func(*outbox.Event){
		"CloudEvents property":   func(e *outbox.Event) { e.Headers = map[string]string{"CE_id": "x"} },
		"ce- prefix":             func(e *outbox.Event) { e.Headers = map[string]string{"ce-type": "x"} },
		"Content-Type":           func(e *outbox.Event) { e.Headers = map[string]string{"content-type": "x"} },
		"KEYS":                   func(e *outbox.Event) { e.Headers = map[string]string{"KEYS": "x"} },
		"delay (any case)":       func(e *outbox.Event) { e.Headers = map[string]string{"delay": "3"} },
		"sharding key":           func(e *outbox.Event) { e.Headers = map[string]string{"SHARDING_KEY": "x"} },
		"timer":                  func(e *outbox.Event) { e.Headers = map[string]string{"TIMER_DELIVER_MS": "1"} },
		"empty header value":     func(e *outbox.Event) { e.Headers = map[string]string{"h": ""} },
		"control char in header": func(e *outbox.Event) { e.Headers = map[string]string{"h": "a\x01b"} },
		"too large":              func(e *outbox.Event) { e.Payload = make([]byte, 10_001) },
		"illegal topic":          func(e *outbox.Event) { e.Topic = "orders.paid" },
		"long topic":             func(e *outbox.Event) { e.Topic = strings.Repeat("t", 128) },
		"not a UUID":             func(e *outbox.Event) { e.EventID = "42" },
		"empty type":             func(e *outbox.Event) { e.Type = "" },
	}
	for name, edit := range cases {
		bad := event("t", "bad", 1)
		edit(&bad)
		events := []outbox.Event{event("t", "k1", 0), bad, event("t", "k2", 2)}
		before := len(f.sent)
		res := b.Publish(context.Background(), events)
		if res[0] != nil || res[2] != nil {
			t.Errorf("%s: the events around it failed: %v, %v", name, res[0], res[2])
		}
		if !broker.IsPermanent(res[1]) || !errors.Is(res[1], outbox.ErrInvalidMessage) && !errors.Is(res[1], outbox.ErrPayloadTooLarge) && !errors.Is(res[1], rocketmqbroker.ErrInvalidTopic) {
			t.Errorf("%s: %v; want a permanent error naming the problem", name, res[1])
		}
		if n := len(f.sent) - before; n != 2 {
			t.Errorf("%s: %d messages sent, want the 2 good ones", name, n)
		}
		var ve *outbox.ValidationError
		if err := b.Check(bad.Message); name != "not a UUID" && name != "empty type" && !errors.As(err, &ve) {
			t.Errorf("%s: Check = %v; want a *outbox.ValidationError", name, err)
		}
	}
	if err := b.Check(event("t", "k", 0).Message); err != nil {
		t.Errorf("Check(good): %v", err)
	}
}

func TestContextAndClose(t *testing.T) {
	f := &fakeSender{busy: make(chan struct{})}
	b := newBroker(t, f, rocketmqbroker.Config{Timeout: 200 * time.Millisecond})
	start := time.Now()
	res := b.Publish(context.Background(), []outbox.Event{event("t", "k", 0), event("t", "k", 1), event("t", "j", 2)})
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Publish took %v with a 200ms timeout", d)
	}
	for i, err := range res {
		if err == nil || broker.IsPermanent(err) {
			t.Errorf("result %d after the deadline: %v; want a transient error", i, err)
		}
	}
	if !errors.Is(res[0], context.DeadlineExceeded) || !errors.Is(res[1], broker.ErrNotAttempted) {
		t.Errorf("results %v; want the deadline, then not attempted", res)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, err := range b.Publish(context.Background(), []outbox.Event{event("t", "k", 3)}) {
		if !errors.Is(err, broker.ErrUnavailable) || !errors.Is(err, rocketmqbroker.ErrClosed) {
			t.Errorf("after Close: %v", err)
		}
	}
	if res := b.Publish(context.Background(), nil); len(res) != 0 {
		t.Errorf("Publish(nil) = %v", res)
	}
}

func TestURLs(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{"rocketmq://127.0.0.1:9876?bogus=1", `unknown option "bogus"`},
		{"rocketmq://127.0.0.1:9876?max_message=big", `max_message="big"`},
		{"rocketmq://127.0.0.1:9876?retries=-1", `retries="-1"`},
		{"kafka://127.0.0.1:9876", "the scheme must be rocketmq://"},
		{"rocketmq://127.0.0.1", "is not host:port"},
		{"rocketmq://a:1,ak:sk@b:2", "only the first name server"},
		{"rocketmq://ak:s3cr%zzet@h:9876", "percent-encode"},
	} {
		err := rocketmqbroker.CheckURL(c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckURL(%q): %v; want %q", c.url, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr") {
			t.Errorf("CheckURL(%q): the secret shows: %v", c.url, err)
		}
	}
	for _, good := range []string{"", "rocketmq://127.0.0.1:9876", "rocketmq://ak:sk@10.0.0.1:9876,10.0.0.2:9876?group=g&namespace=n&source=/x&max_message=1000&retries=0"} {
		if err := rocketmqbroker.CheckURL(good); err != nil {
			t.Errorf("CheckURL(%q): %v", good, err)
		}
	}
	if _, err := rocketmqbroker.New(nil, rocketmqbroker.Config{}); err == nil {
		t.Error("New(nil) accepted")
	}
	if _, err := rocketmqbroker.New(&fakeSender{}, rocketmqbroker.Config{Timeout: -1}); err == nil {
		t.Error("New with a negative timeout accepted")
	}
}
