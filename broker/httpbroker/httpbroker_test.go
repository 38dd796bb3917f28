package httpbroker_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/brokertest"
	"github.com/outbox-go/outbox/broker/httpbroker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// secret is a Standard Webhooks secret: whsec_ and 32 random-looking bytes
// in base64.
const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw2KcLzFWcSGQ="

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func event(topic string, i int) outbox.Event {
	return outbox.Event{ID: int64(i + 1), CreatedAt: time.Now(), Message: outbox.Message{
		EventID: outbox.NewEventID(), Topic: topic, Key: fmt.Sprintf("k%d", i), Type: "T", SchemaVersion: 1,
		ContentType: outbox.DefaultContentType, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)),
	}}
}

// verify checks a request's Standard Webhooks signature from the spec
// alone (standardwebhooks.com): the key is the base64 after whsec_; the
// signed content is id.timestamp.body; webhook-signature holds one or more
// space-separated "v1,<base64 HMAC-SHA256>"; the timestamp is Unix seconds
// within five minutes of now. It shares no code with the adapter.
func verify(sec string, h http.Header, body []byte) error {
	id, ts, sigs := h.Get("Webhook-Id"), h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("a webhook-id, webhook-timestamp or webhook-signature header is missing")
	}
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q is not Unix seconds", ts)
	}
	if d := time.Since(time.Unix(n, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("webhook-timestamp is %v away from now", d)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sec, "whsec_"))
	if err != nil {
		return err
	}
	mac := hmac.New(sha256.New, key)
	io.WriteString(mac, id+"."+ts+".")
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(sigs) {
		version, b64, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("no signature in %q matches", sigs)
}

// sink is an endpoint that keeps what it was sent, per topic (the path
// after /hooks/), checking every signature.
type sink struct {
	t      testing.TB
	secret string
	mu     sync.Mutex
	queues map[string]chan brokertest.Received
	bad    atomic.Int64
}

func (s *sink) queue(topic string) chan brokertest.Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queues == nil {
		s.queues = map[string]chan brokertest.Received{}
	}
	q, ok := s.queues[topic]
	if !ok {
		q = make(chan brokertest.Received, 10000)
		s.queues[topic] = q
	}
	return q
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.Method != http.MethodPost {
		s.bad.Add(1)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if s.secret != "" {
		if err := verify(s.secret, r.Header, body); err != nil {
			s.bad.Add(1)
			s.t.Errorf("signature: %v", err)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if r.Header.Get("Webhook-Id") != r.Header.Get("Ce-Id") {
			s.t.Errorf("webhook-id %q is not the event id %q", r.Header.Get("Webhook-Id"), r.Header.Get("Ce-Id"))
		}
	}
	topic, ok := strings.CutPrefix(r.URL.Path, "/hooks/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	m, err := decode(topic, r.Header, body)
	if err != nil {
		s.t.Errorf("decode: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.queue(topic) <- m
	w.WriteHeader(http.StatusNoContent)
}

// decode reads the CloudEvents HTTP binary mode back, as a receiver would.
// HTTP header names are case-insensitive: each header is kept under its
// canonical and its lower-case name.
func decode(topic string, h http.Header, body []byte) (brokertest.Received, error) {
	attr := func(name string) (string, error) { return broker.PercentDecode(h.Get("ce-" + name)) }
	r := brokertest.Received{Topic: topic, Payload: body, Headers: map[string]string{}}
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
	for k, v := range h {
		r.Headers[k], r.Headers[strings.ToLower(k)] = v[0], v[0]
	}
	return r, nil
}

type receiver struct{ q chan brokertest.Received }

func (r receiver) Next(ctx context.Context) (brokertest.Received, error) {
	select {
	case m := <-r.q:
		return m, nil
	case <-ctx.Done():
		return brokertest.Received{}, ctx.Err()
	}
}

func startSink(t *testing.T, sec string) (*sink, *httptest.Server) {
	s := &sink{t: t, secret: sec}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

func dial(t *testing.T, url string, cfg httpbroker.Config) *httpbroker.Broker {
	t.Helper()
	b, err := httpbroker.Dial(url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

const testMax = 64 << 10

func harness(name, sec string) brokertest.Harness {
	var mu sync.Mutex
	sinks := map[broker.Broker]*sink{}
	return brokertest.Harness{
		Name: name,
		New: func(t *testing.T, topic string) (broker.Broker, brokertest.Receiver) {
			s, srv := startSink(t, sec)
			b := dial(t, srv.URL+"/hooks/{topic}", httpbroker.Config{Secret: sec, MaxMessage: testMax})
			mu.Lock()
			sinks[b] = s
			mu.Unlock()
			return b, receiver{s.queue(topic)}
		},
		MaxPayload:     testMax,
		Transport:      broker.HTTP,
		KeysInParallel: true,
		AddTopic: func(t *testing.T, b broker.Broker, topic string) brokertest.Receiver {
			mu.Lock()
			defer mu.Unlock()
			return receiver{sinks[b].queue(topic)}
		},
	}
}

func TestConformanceSigned(t *testing.T) {
	brokertest.Run(t, harness("httpbroker (signed)", secret))
}

func TestConformanceUnsigned(t *testing.T) {
	brokertest.Run(t, harness("httpbroker (unsigned)", ""))
}
