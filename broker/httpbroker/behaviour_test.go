package httpbroker_test

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/httpbroker"
)

// status answers every request with code and the given headers.
func status(t *testing.T, code int, hdr map[string]string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range hdr {
			w.Header().Set(k, v)
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte("nope\r\nsecond line"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestStatusClassification(t *testing.T) {
	t.Parallel()
	date := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	for _, c := range []struct {
		code      int
		hdr       map[string]string
		permanent bool
		after     time.Duration // at least
		sentinel  error
	}{
		{200, nil, false, 0, nil},
		{202, nil, false, 0, nil},
		{400, nil, true, 0, httpbroker.ErrRejected},
		{401, nil, true, 0, httpbroker.ErrRejected},
		{404, nil, true, 0, httpbroker.ErrRejected},
		{413, nil, true, 0, httpbroker.ErrRejected},
		{408, nil, false, 0, nil},
		{429, map[string]string{"Retry-After": "7"}, false, 7 * time.Second, nil},
		{503, map[string]string{"Retry-After": date}, false, 80 * time.Second, nil},
		{503, map[string]string{"Retry-After": "99999999"}, false, time.Hour, nil}, // capped at MaxRetryAfter
		{500, map[string]string{"Retry-After": "soon"}, false, 0, nil},
		{502, nil, false, 0, nil},
		{301, map[string]string{"Location": "https://elsewhere.example/x?token=S3CRET"}, true, 0, httpbroker.ErrRedirected},
		{307, map[string]string{"Location": "/other"}, true, 0, httpbroker.ErrRedirected},
	} {
		srv := status(t, c.code, c.hdr)
		b := dial(t, srv.URL+"/{topic}", httpbroker.Config{})
		err := b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{event("orders", 0)})[0]
		if c.code < 300 {
			if err != nil {
				t.Errorf("%d: %v", c.code, err)
			}
			continue
		}
		if err == nil || broker.IsPermanent(err) != c.permanent || errors.Is(err, broker.ErrUnavailable) {
			t.Errorf("%d: %v; want permanent=%v", c.code, err, c.permanent)
			continue
		}
		if c.sentinel != nil && !errors.Is(err, c.sentinel) {
			t.Errorf("%d: %v; want it to wrap %v", c.code, err, c.sentinel)
		}
		d := broker.RetryAfterOf(err)
		switch {
		case c.after == 0 && d != 0:
			t.Errorf("%d %v: asks to wait %v; want no delay of its own", c.code, c.hdr, d)
		case c.after > 0 && (d < c.after || d > max(c.after, 100*time.Second)):
			t.Errorf("%d %v: asks to wait %v; want at least %v", c.code, c.hdr, d, c.after)
		}
		if (c.code < 300 || c.code >= 400) && !strings.Contains(err.Error(), "nope") || strings.ContainsAny(err.Error(), "\r\n") || strings.Contains(err.Error(), "S3CRET") {
			t.Errorf("%d: the error %q should quote the body on one line, and no secret", c.code, err)
		}
	}
}

// A 429 with Retry-After, then success: the throttled event is delivered
// once the endpoint takes it, and only once.
func TestThrottledThenAccepted(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	b := dial(t, srv.URL, httpbroker.Config{})
	e := event("", 0)
	err := b.Publish(ctxFor(t, 5*time.Second), []outbox.Event{e})[0]
	if broker.RetryAfterOf(err) != 2*time.Second {
		t.Fatalf("first attempt: %v; want a retry after 2s", err)
	}
	if err := b.Publish(ctxFor(t, 5*time.Second), []outbox.Event{e})[0]; err != nil {
		t.Fatalf("second attempt: %v", err)
	}
}

// A server that takes the request and never answers: the request ends at
// Config.Timeout with a transient error, and Close does not hang.
func TestHangingEndpointTimesOut(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	b := dial(t, srv.URL, httpbroker.Config{Timeout: 300 * time.Millisecond})
	start := time.Now()
	res := b.Publish(context.Background(), []outbox.Event{event("", 0), event("", 1)})
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Publish took %v with a 300ms Timeout", d)
	}
	for i, err := range res {
		if err == nil || broker.IsPermanent(err) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("result %d = %v; want a transient deadline error", i, err)
		}
	}
}

func TestUnreachableIsUnavailable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	b := dial(t, "http://"+addr+"/hooks/{topic}?token=S3CRETTOKEN&webhook_secret="+strings.TrimPrefix(secret, ""), httpbroker.Config{})
	for i, err := range b.Publish(ctxFor(t, 5*time.Second), []outbox.Event{event("t", 0), event("t", 1)}) {
		if !errors.Is(err, broker.ErrUnavailable) || broker.IsPermanent(err) {
			t.Errorf("result %d: %v; want a transient ErrUnavailable", i, err)
		}
		if msg := err.Error(); strings.Contains(msg, "S3CRETTOKEN") || strings.Contains(msg, "whsec_") || !strings.Contains(msg, addr) {
			t.Errorf("result %d: %q must name the endpoint without its secrets", i, msg)
		}
	}
}

// TLS is verified by default: a server whose certificate the system does
// not trust is refused (unavailable, not sent), and accepted once its CA
// is configured.
func TestTLSVerifiedByDefault(t *testing.T) {
	t.Parallel()
	s := &sink{t: t, secret: secret}
	srv := httptest.NewUnstartedServer(s)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is the point
	srv.StartTLS()
	defer srv.Close()
	b := dial(t, srv.URL+"/hooks/{topic}", httpbroker.Config{Secret: secret})
	err := b.Publish(ctxFor(t, 5*time.Second), []outbox.Event{event("tls", 0)})[0]
	var cv x509.UnknownAuthorityError
	if err == nil || !errors.As(err, &cv) || !errors.Is(err, broker.ErrUnavailable) {
		t.Errorf("publish to an untrusted certificate: %v; want a refusal naming the unknown authority", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	tc := srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	tc.RootCAs = pool
	trusted := dial(t, srv.URL+"/hooks/{topic}", httpbroker.Config{Secret: secret, TLSConfig: tc})
	if err := trusted.Publish(ctxFor(t, 5*time.Second), []outbox.Event{event("tls", 1)})[0]; err != nil {
		t.Errorf("publish with the server's CA trusted: %v", err)
	}
	if m, _ := (receiver{s.queue("tls")}).Next(ctxFor(t, 5*time.Second)); m.Payload == nil {
		t.Error("the event did not arrive")
	}
}

// MaxInFlight bounds the requests in flight across concurrent Publish
// calls, and a key's events go one at a time, in order.
func TestConcurrencyBoundAndKeyOrder(t *testing.T) {
	t.Parallel()
	var now, peak atomic.Int64
	var mu sync.Mutex
	seen := map[string][]string{} // key → payloads in arrival order
	busy := map[string]bool{}     // key → a request of it is in flight
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		defer now.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		key := r.Header.Get("Ce-Partitionkey")
		mu.Lock()
		if busy[key] {
			t.Errorf("two requests of key %s in flight at once", key)
		}
		busy[key] = true
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		body := make([]byte, r.ContentLength)
		_, _ = r.Body.Read(body)
		mu.Lock()
		busy[key] = false
		seen[key] = append(seen[key], string(body))
		mu.Unlock()
	}))
	defer srv.Close()
	b := dial(t, srv.URL, httpbroker.Config{MaxInFlight: 4})
	if f := broker.FeaturesOf(b); f.MaxInFlight != 4 || f.Ordering != broker.OrderKey {
		t.Errorf("Features = %+v", f)
	}
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() {
			events := make([]outbox.Event, 40)
			for i := range events {
				events[i] = event("", i)
				events[i].Key = string(rune('a'+g)) + string(rune('0'+i%5))
				events[i].Payload = []byte{byte('0' + i/5)}
			}
			for i, err := range b.Publish(ctxFor(t, 30*time.Second), events) {
				if err != nil {
					t.Errorf("call %d, event %d: %v", g, i, err)
				}
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 4 || p < 2 {
		t.Errorf("peak of %d requests in flight; want 2 to 4 (MaxInFlight 4)", p)
	}
	for key, got := range seen {
		if strings.Join(got, "") != "01234567" {
			t.Errorf("key %s arrived as %v, want in order", key, got)
		}
	}
	if len(seen) != 15 {
		t.Errorf("%d keys arrived, want 15", len(seen))
	}
}

// After a key's event fails, its later events in the call are not sent
// (transient, so the relay gives them back), and other keys are.
func TestKeyHeldAfterFailure(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Ce-Id"))
		mu.Unlock()
		if r.Header.Get("X-Fail") != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	b := dial(t, srv.URL, httpbroker.Config{})
	events := []outbox.Event{event("", 0), event("", 1), event("", 2), event("", 3)}
	events[0].Key, events[1].Key, events[2].Key, events[3].Key = "k", "k", "k", "other"
	events[1].Headers = map[string]string{"X-Fail": "1"}
	res := b.Publish(ctxFor(t, 10*time.Second), events)
	if res[0] != nil || res[3] != nil || res[1] == nil || res[2] == nil || broker.IsPermanent(res[2]) {
		t.Fatalf("results %v", res)
	}
	for _, id := range got {
		if id == events[2].EventID {
			t.Error("the event after the failed one of its key was sent")
		}
	}
}

func TestDialErrorsHideSecrets(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, says string }{
		{"ftp://hooks.example/x?webhook_secret=" + secret, "http or https"},
		{"https:///x?token=S3CRETTOKEN", "no host"},
		{"https://alice:S3CRETPW@hooks.example/{topic}", "user info"},
		{"https://hooks.example/{topic}/{topic}", "more than once"},
		{"https://hooks.example/x?webhook_secret=whsec_S3CRET%zz", "URL encoding"},
		{"https://hooks.example/x?webhook_secret=S3CRETNOPREFIX", "whsec_"},
		{"https://hooks.example/x?webhook_secret=whsec_S3CRET!!", "base64"},
		{"https://hooks.example/x?webhook_secret=whsec_czNjcmV0", "24 to 64"},
		{"https://hooks.example/\x7f?webhook_secret=" + secret, "URL"},
	} {
		_, err := httpbroker.Dial(c.url, httpbroker.Config{})
		if err == nil || strings.Contains(err.Error(), "S3CRET") || strings.Contains(err.Error(), "czNjcmV0") ||
			strings.Contains(err.Error(), secret[6:]) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("Dial(%q) = %v; want an error saying %q, without the secret", c.url, err, c.says)
		}
	}
	for _, cfg := range []httpbroker.Config{{Timeout: -1}, {MaxInFlight: -1}, {MaxRetryAfter: -1}, {MaxMessage: -1}, {Source: "\x01"}} {
		if _, err := httpbroker.New(nil, "https://hooks.example/", cfg); err == nil {
			t.Errorf("New with %+v succeeded", cfg)
		}
	}
}

// The topic is escaped for where {topic} stands, and webhook_secret never
// reaches the endpoint.
func TestURLTemplate(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var uris []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		uris = append(uris, r.RequestURI)
		mu.Unlock()
	}))
	defer srv.Close()
	for _, tmpl := range []string{"/in/{topic}/x?a=1&webhook_secret=" + secret, "/q?topic={topic}&a=1"} {
		b := dial(t, srv.URL+tmpl, httpbroker.Config{})
		if err := b.Publish(ctxFor(t, 5*time.Second), []outbox.Event{event("orders/paid &x=1", 0)})[0]; err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"/in/orders%2Fpaid%20&x=1/x?a=1", "/q?topic=orders%2Fpaid+%26x%3D1&a=1"}
	for i := range want {
		if uris[i] != want[i] {
			t.Errorf("request %d went to %q, want %q", i, uris[i], want[i])
		}
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	b, err := httpbroker.New(nil, "https://hooks.example/{topic}", httpbroker.Config{MaxMessage: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"webhook-id", "Content-Length", "ce-type", "Host", "content-type"} {
		m := outbox.Message{Topic: "t", Type: "T", Headers: map[string]string{name: "x"}}.Normalized()
		if err := b.Check(m); !errors.Is(err, outbox.ErrReservedHeader) {
			t.Errorf("Check with header %s = %v", name, err)
		}
	}
	if err := b.Check(outbox.Message{Type: "T"}.Normalized()); err == nil {
		t.Error("Check accepted an empty topic for a URL with {topic}")
	}
	if err := b.Check(outbox.Message{Topic: "t", Type: "T", Payload: make([]byte, 1000)}.Normalized()); !errors.Is(err, outbox.ErrPayloadTooLarge) {
		t.Errorf("Check of 1000 bytes with MaxMessage 1000 = %v", err)
	}
	if err := b.Check(outbox.Message{Topic: "t", Type: "T", Payload: make([]byte, 500), Headers: map[string]string{"x-death": "ok", "ce_type": "ok"}}.Normalized()); err != nil {
		t.Errorf("Check of a good message = %v", err)
	}
}
