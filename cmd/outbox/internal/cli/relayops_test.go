package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/telemetry"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// runningRelay is `outbox relay` run through Main in the test's process,
// as a process manager runs it.
type runningRelay struct {
	t      *testing.T
	addr   string // --metrics-addr
	cancel context.CancelFunc
	done   chan int
	mu     sync.Mutex
	stderr bytes.Buffer
}

func startRelayCLI(t *testing.T, args ...string) *runningRelay {
	t.Helper()
	r := &runningRelay{t: t, addr: freeAddr(t), done: make(chan int, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	w := writerFunc(func(p []byte) (int, error) { r.mu.Lock(); defer r.mu.Unlock(); return r.stderr.Write(p) })
	go func() {
		r.done <- Main(ctx, append([]string{"relay", "--metrics-addr", r.addr}, args...), io.Discard, w)
	}()
	t.Cleanup(func() { r.stop() })
	r.waitFor("/healthz to answer", 20*time.Second, func() bool { code, _ := r.get("/healthz"); return code == 200 })
	return r
}

func (r *runningRelay) log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stderr.String()
}

// stop sends the relay its SIGTERM (cancels its context) and returns the
// exit code; it is called once more at cleanup, harmlessly.
func (r *runningRelay) stop() int {
	r.cancel()
	select {
	case code, ok := <-r.done:
		if ok {
			close(r.done)
			return code
		}
		return -1
	case <-time.After(stopWithin + 5*time.Second):
		r.t.Fatalf("the relay did not stop within %s:\n%s", stopWithin, r.log())
		return -1
	}
}

// running fails the test if the relay has exited.
func (r *runningRelay) running() {
	r.t.Helper()
	select {
	case code := <-r.done:
		r.done <- code
		r.t.Fatalf("the relay exited (%d) instead of waiting:\n%s", code, r.log())
	default:
	}
}

func (r *runningRelay) get(path string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + r.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (r *runningRelay) waitFor(what string, d time.Duration, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			code, body := r.get("/readyz")
			r.t.Fatalf("timed out after %s waiting for %s; /readyz %d %q; log:\n%s", d, what, code, body, r.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// notReady waits until /readyz answers 503 saying every one of want.
func (r *runningRelay) notReady(want ...string) string {
	r.t.Helper()
	var body string
	r.waitFor("/readyz 503 saying "+strings.Join(want, ", "), 30*time.Second, func() bool {
		var code int
		code, body = r.get("/readyz")
		if code != http.StatusServiceUnavailable {
			return false
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return true
	})
	return body
}

func enqueueN(t *testing.T, st driver.Store, topic string, n int) {
	t.Helper()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: topic, Key: "k" + itoa(int64(i%5)), Type: "T", Payload: []byte(`{}`)}
	}
	if err := st.Enqueue(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
}

func streamHolds(t *testing.T, s *testnats.Stream, n uint64) func() bool {
	return func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		got, err := s.Count(ctx)
		return err == nil && got == n
	}
}

// A relay started while its broker is down (a closed port) keeps running:
// /healthz and /metrics answer, /readyz says 503 and names the broker, the
// log says so once however many retries; when an embedded NATS comes up on
// that port the relay connects, drains the backlog and turns ready.
func TestRelayWaitsForItsBroker(t *testing.T) {
	o := teststores.Open(t, "sqlite", store.Options{})
	nats := testnats.Start(t)
	stream := testnats.NewStream(t, nats.URL()) // kept in the server's store across the outage
	nats.Stop()
	enqueueN(t, o.Store, stream.Topic("orders"), 40)
	brokerURL := strings.Replace(nats.URL(), "nats://", "nats://relay:s3cret@", 1)

	r := startRelayCLI(t, "--db", o.URL, "--table", o.Opts.Table, "--broker", brokerURL, "--log-format", "json")
	body := r.notReady("starting: the broker is unreachable", "retrying")
	t.Logf("/readyz while the broker is down: %s", body)
	if code, m := r.get("/metrics"); code != 200 || !strings.Contains(m, "outbox_broker_up 0\n") || !strings.Contains(m, "outbox_store_up 1\n") || !strings.Contains(m, "outbox_pending_events 40\n") {
		t.Errorf("/metrics while the broker is down = %d:\n%s", code, m)
	}
	time.Sleep(1500 * time.Millisecond) // several retries
	r.running()

	nats.Restart(t)
	r.waitFor("the backlog to drain", 60*time.Second, streamHolds(t, stream, 40))
	r.waitFor("/readyz 200", 30*time.Second, func() bool { code, _ := r.get("/readyz"); return code == 200 })
	if code := r.stop(); code != exitOK {
		t.Errorf("relay exit %d", code)
	}

	log := r.log()
	if strings.Contains(log, "s3cret") {
		t.Errorf("the log shows the broker password:\n%s", log)
	}
	if n := strings.Count(log, "broker unreachable"); n != 1 {
		t.Errorf("%d lines say the broker is unreachable, want 1 (one per change of state):\n%s", n, log)
	}
	if n := strings.Count(log, "broker reachable"); n != 1 {
		t.Errorf("%d lines say the broker is reachable again, want 1:\n%s", n, log)
	}
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil || v["msg"] == nil || v["level"] == nil {
			t.Errorf("--log-format json wrote a line that is not a JSON record: %q", line)
		}
	}
}

// proxy forwards a loopback port to a real server once started: a database
// that "comes back" on the address the relay was given.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startProxy(t *testing.T, addr, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("proxy on %s: %v", addr, err)
	}
	p := &proxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(s, c); s.Close() }()
			go func() { defer p.wg.Done(); _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// A relay started while its PostgreSQL or MariaDB is unreachable (a closed
// port) keeps running and says so on /readyz and /metrics; once the
// database answers on that port (a proxy to the real server) it connects
// and delivers.
func TestRelayWaitsForItsDatabase(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) { t.Parallel(); relayWaitsForDatabase(t, kind) })
	}
}

func relayWaitsForDatabase(t *testing.T, kind string) {
	natsURL := testnats.Shared(t)
	stream := testnats.NewStream(t, natsURL)
	o := teststores.Open(t, kind, store.Options{})
	enqueueN(t, o.Store, stream.Topic("orders"), 30)
	u, err := url.Parse(o.URL)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	u.Host = freeAddr(t)
	if kind == "postgres" {
		u.User = url.UserPassword(u.User.Username(), "s3cret") // trust auth ignores it; the log must not show it
	}

	r := startRelayCLI(t, "--db", u.String(), "--table", o.Opts.Table, "--broker", natsURL)
	body := r.notReady("starting: the database is unreachable")
	t.Logf("/readyz while the database is down: %s", body)
	if strings.Contains(body, "s3cret") {
		t.Errorf("/readyz shows the database password: %q", body)
	}
	if code, m := r.get("/metrics"); code != 200 || !strings.Contains(m, "outbox_store_up 0\n") || strings.Contains(m, "outbox_pending_events") {
		t.Errorf("/metrics while the database is down = %d:\n%s", code, m)
	}
	time.Sleep(1500 * time.Millisecond)
	r.running()

	startProxy(t, u.Host, target)
	r.waitFor("the backlog to drain", 60*time.Second, streamHolds(t, stream, 30))
	r.waitFor("/readyz 200", 30*time.Second, func() bool { code, _ := r.get("/readyz"); return code == 200 })
	if code := r.stop(); code != exitOK {
		t.Errorf("relay exit %d", code)
	}
	log := r.log()
	if strings.Contains(log, "s3cret") {
		t.Errorf("the log shows the database password:\n%s", log)
	}
	if n := strings.Count(log, "database unreachable"); n != 1 {
		t.Errorf("%d lines say the database is unreachable, want 1:\n%s", n, log)
	}
}

// The stall test through the real CLI: the broker (an embedded NATS) stops
// while events wait; /readyz turns 503 once the oldest is older than
// --stall-after with nothing delivered, and names why; the relay neither
// exits nor buries anything, and once NATS is back it drains and is ready.
func TestRelayReadyzFailsWhileTheBrokerStalls(t *testing.T) {
	if testing.Short() {
		t.Skip("a stall of a few seconds")
	}
	o := teststores.Open(t, "sqlite", store.Options{})
	nats := testnats.Start(t)
	stream := testnats.NewStream(t, nats.URL())
	r := startRelayCLI(t, "--db", o.URL, "--table", o.Opts.Table, "--broker", nats.URL(),
		"--stall-after", "1s", "--ready-grace", "1s", "--backoff", "100ms", "--poll", "50ms")
	r.waitFor("/readyz 200", 30*time.Second, func() bool { code, _ := r.get("/readyz"); return code == 200 })
	enqueueN(t, o.Store, stream.Topic("orders"), 5)
	r.waitFor("the first events", 30*time.Second, streamHolds(t, stream, 5))

	nats.Stop()
	enqueueN(t, o.Store, stream.Topic("orders"), 20)
	body := r.notReady("delivery stalled", "broker failing")
	t.Logf("/readyz while stalled:\n%s", body)
	if _, m := r.get("/metrics"); !strings.Contains(m, "outbox_broker_up 0\n") || !strings.Contains(m, "outbox_dead_events 0\n") {
		t.Errorf("/metrics while stalled:\n%s", m)
	}
	r.running()

	nats.Restart(t)
	r.waitFor("the backlog to drain", 60*time.Second, streamHolds(t, stream, 25))
	r.waitFor("/readyz 200 again", 30*time.Second, func() bool { code, _ := r.get("/readyz"); return code == 200 })
	if code := r.stop(); code != exitOK {
		t.Errorf("relay exit %d", code)
	}
	log := r.log()
	if n := strings.Count(log, "broker failing"); n != 1 {
		t.Errorf("%d lines say the broker is failing, want 1:\n%s", n, log)
	}
	if n := strings.Count(log, "broker recovered"); n != 1 {
		t.Errorf("%d lines say the broker recovered, want 1:\n%s", n, log)
	}
}

// --otlp-endpoint turns tracing on: the publish spans of traced events
// reach an OTLP/HTTP receiver (a stand-in collector on loopback) by the
// time the relay has stopped; a URL that is not http(s) is refused.
func TestRelayExportsTracesOverOTLP(t *testing.T) {
	var (
		mu    sync.Mutex
		posts int
		kinds []string
	)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" && len(body) > 0 {
			posts++
			kinds = append(kinds, r.Header.Get("Content-Type"))
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()

	natsURL := testnats.Shared(t)
	stream := testnats.NewStream(t, natsURL)
	o := teststores.Open(t, "sqlite", store.Options{})
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("producer").Start(context.Background(), "produce")
	for i := range 5 {
		m := telemetry.WithTrace(ctx, outbox.Message{Topic: stream.Topic("orders"), Key: itoa(int64(i)), Type: "T", Payload: []byte(`{}`)})
		if err := o.Store.Enqueue(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	span.End()

	r := startRelayCLI(t, "--db", o.URL, "--table", o.Opts.Table, "--broker", natsURL, "--otlp-endpoint", collector.URL)
	r.waitFor("the events", 30*time.Second, streamHolds(t, stream, 5))
	if code := r.stop(); code != exitOK {
		t.Fatalf("relay exit %d:\n%s", code, r.log())
	}
	mu.Lock()
	defer mu.Unlock()
	if posts == 0 {
		t.Fatalf("the collector received no spans:\n%s", r.log())
	}
	if kinds[0] != "application/x-protobuf" {
		t.Errorf("OTLP content type %q", kinds[0])
	}
	if !strings.Contains(r.log(), "tracing="+collector.URL) {
		t.Errorf("the start line does not say where traces go:\n%s", r.log())
	}

	if code, _, stderr := runCLI("relay", "--db", o.URL, "--broker", natsURL, "--otlp-endpoint", "ftp://u:s3cret@x"); code != exitUsage || !strings.Contains(stderr, "--otlp-endpoint") || strings.Contains(stderr, "s3cret") {
		t.Errorf("--otlp-endpoint ftp://…: exit %d %q", code, stderr)
	}
}

// A SIGTERM while the relay waits for its broker is a graceful stop: exit
// 0, promptly, nothing left running.
func TestRelayStopsWhileWaiting(t *testing.T) {
	o := teststores.Open(t, "sqlite", store.Options{})
	r := startRelayCLI(t, "--db", o.URL, "--table", o.Opts.Table, "--broker", "nats://"+freeAddr(t))
	r.notReady("starting: the broker is unreachable")
	start := time.Now()
	if code := r.stop(); code != exitOK {
		t.Errorf("stopped while waiting: exit %d:\n%s", code, r.log())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stopping took %s", d)
	}
}

// What retrying cannot fix still exits at once, in one line: a missing
// outbox table (exit 1, naming it), on every database.
func TestRelayExitsOnAMissingTable(t *testing.T) {
	for _, kind := range teststores.Kinds {
		o := teststores.Open(t, kind, store.Options{})
		start := time.Now()
		code, _, stderr := runCLI("relay", "--db", o.URL, "--table", "no_such_table", "--broker", "nats://"+freeAddr(t), "--metrics-addr", freeAddr(t))
		if code != exitFail || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "no_such_table does not exist") {
			t.Errorf("%s: exit %d %q; want 1 naming the table", kind, code, stderr)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: took %s to refuse", kind, d)
		}
	}
}
