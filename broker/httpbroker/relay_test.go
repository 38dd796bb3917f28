package httpbroker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/httpbroker"
	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/inbox/httpmsg"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// Events enqueued in SQLite are delivered by the relay to a webhook
// receiver written with net/http and inbox/httpmsg, which verifies every
// signature, throttles (429 with Retry-After: 1) and fails (503) some
// requests: every event arrives, with payload, headers and CloudEvents
// attributes unchanged, each key's first deliveries in enqueue order.
func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	var (
		mu        sync.Mutex
		got       []inbox.Message
		requests  atomic.Int64
		throttled atomic.Int64
	)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hooks/{topic}", func(w http.ResponseWriter, r *http.Request) {
		m, err := httpmsg.ReadRequest(r, r.PathValue("topic"), secret)
		if err != nil {
			t.Errorf("ReadRequest: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch n := requests.Add(1); {
		case n%97 == 0:
			throttled.Add(1)
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		case n%89 == 0:
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	b := dial(t, srv.URL+"/hooks/{topic}?webhook_secret="+strings.NewReplacer("+", "%2B", "/", "%2F", "=", "%3D").Replace(secret), httpbroker.Config{Source: "/e2e"})
	st := teststores.Open(t, "sqlite", store.Options{Check: b.Check}).Store

	const n, keys = 1000, 40
	msgs := make([]outbox.Message, n)
	seq := map[string]int{}
	for i := range msgs {
		key := fmt.Sprintf("agg-%d", i%keys)
		if i%11 == 0 {
			key = ""
		}
		seq[key]++
		msgs[i] = outbox.Message{Topic: "orders", Key: key, Type: "Bumped", AggregateType: "Agg", SchemaVersion: 1 + i%3,
			Payload: fmt.Appendf(nil, "%s#%d", key, seq[key]), Headers: map[string]string{"traceparent": fmt.Sprintf("00-%032x-%016x-01", i, i)}}
	}
	for i := 0; i < n; i += 250 {
		if err := st.Enqueue(context.Background(), msgs[i:i+250]...); err != nil {
			t.Fatal(err)
		}
	}
	r, err := relay.New(st, b, relay.Config{BatchSize: 200, PollInterval: 20 * time.Millisecond, BackoffBase: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, err := st.Stats(context.Background())
		if err == nil && s.Pending() == 0 && s.Dead == 0 {
			break
		}
		if time.Now().After(deadline) || s.Dead > 0 {
			t.Fatalf("not drained: %+v %v", s, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	if throttled.Load() == 0 {
		t.Error("no request was throttled; the test proves less than it says")
	}
	byPayload := map[string]outbox.Message{}
	for _, m := range msgs {
		byPayload[string(m.Payload)] = m
	}
	seen := map[string]bool{}
	next := map[string]int{}
	for _, m := range got {
		want, ok := byPayload[string(m.Payload)]
		if !ok {
			t.Fatalf("unexpected payload %q", m.Payload)
		}
		if seen[m.EventID] {
			continue // at least once: a retry after a lost answer
		}
		seen[m.EventID] = true
		if m.Key != want.Key || m.Type != "Bumped" || m.AggregateType != "Agg" || m.SchemaVersion != want.SchemaVersion ||
			m.Source != "/e2e" || m.ContentType != outbox.DefaultContentType || m.Time.IsZero() || m.Topic != "orders" ||
			m.Headers["traceparent"] != want.Headers["traceparent"] || len(m.Headers) != 1 {
			t.Errorf("received %+v, want %+v", m, want)
		}
		if want.Key != "" {
			_, s, _ := strings.Cut(string(m.Payload), "#")
			var k int
			fmt.Sscan(s, &k)
			if k != next[want.Key]+1 {
				t.Errorf("key %s: #%d after #%d", want.Key, k, next[want.Key])
			}
			next[want.Key] = k
		}
	}
	if len(seen) != n {
		t.Errorf("%d of %d events arrived", len(seen), n)
	}
	t.Logf("%d requests for %d events, %d throttled", requests.Load(), n, throttled.Load())
}
