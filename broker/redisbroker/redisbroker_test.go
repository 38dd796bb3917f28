package redisbroker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/brokertest"
	"github.com/outbox-go/outbox/broker/redisbroker"
	"github.com/outbox-go/outbox/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// --- helpers

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

// admin returns a client of its own for url, closed when the test ends.
func admin(t *testing.T, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// cleanup deletes the stream and every dedup key of it when the test ends:
// the shared server keeps no data of ours.
func cleanup(t *testing.T, c *redis.Client, stream string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		keys := []string{stream}
		iter := c.Scan(ctx, 0, redisbroker.DefaultDedupPrefix+"{"+stream+"}:*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		for len(keys) > 0 {
			n := min(len(keys), 500)
			if err := c.Del(ctx, keys[:n]...).Err(); err != nil {
				t.Errorf("delete %s: %v", stream, err)
				return
			}
			keys = keys[n:]
		}
	})
}

func dial(t *testing.T, url string, cfg redisbroker.Config) *redisbroker.Broker {
	t.Helper()
	b, err := redisbroker.Dial(url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

// streamReceiver reads a stream entry by entry, polling XRANGE after the
// last id seen, so it keeps working across a server restart.
type streamReceiver struct {
	c      *redis.Client
	stream string
	last   string
}

func (r *streamReceiver) Next(ctx context.Context) (brokertest.Received, error) {
	for {
		start := "-"
		if r.last != "" {
			start = "(" + r.last
		}
		msgs, err := r.c.XRangeN(ctx, r.stream, start, "+", 1).Result()
		if err == nil && len(msgs) == 1 {
			r.last = msgs[0].ID
			return decode(r.stream, msgs[0]), nil
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return brokertest.Received{}, ctx.Err()
		}
	}
}

// decode reads an entry back as a consumer would.
func decode(stream string, m redis.XMessage) brokertest.Received {
	str := func(f string) string { s, _ := m.Values[f].(string); return s }
	r := brokertest.Received{
		EventID: str(redisbroker.FieldID), Type: str(redisbroker.FieldType), Key: str(redisbroker.FieldKey),
		Topic: stream, Payload: []byte(str(redisbroker.FieldData)), Headers: map[string]string{},
	}
	for f, v := range m.Values {
		if name, ok := strings.CutPrefix(f, redisbroker.HeaderPrefix); ok {
			r.Headers[name], _ = v.(string)
		}
	}
	return r
}

const testMax = 64 << 10

func harness(name, url string, restart func(t *testing.T)) brokertest.Harness {
	return brokertest.Harness{
		Name: name,
		New: func(t *testing.T, topic string) (broker.Broker, brokertest.Receiver) {
			c := admin(t, url)
			cleanup(t, c, topic)
			return dial(t, url, redisbroker.Config{MaxMessage: testMax}), &streamReceiver{c: c, stream: topic}
		},
		MaxPayload: testMax,
		Transport:  broker.Redis,
		Restart:    restart,
		AddTopic: func(t *testing.T, _ broker.Broker, topic string) brokertest.Receiver {
			c := admin(t, url)
			cleanup(t, c, topic)
			return &streamReceiver{c: c, stream: topic}
		},
	}
}

func event(topic string, i int) outbox.Event {
	return outbox.Event{ID: int64(i + 1), CreatedAt: time.Now(), Message: outbox.Message{
		EventID: outbox.NewEventID(), Topic: topic, Key: "k", Type: "T", SchemaVersion: 1,
		ContentType: outbox.DefaultContentType, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)),
	}}
}

// privateServer runs a redis-server of the test's own on a free loopback
// port, with an append-only file so a restart keeps the data: the shared
// server must never be restarted.
type privateServer struct {
	port string
	dir  string
	mu   sync.Mutex
	cmd  *exec.Cmd
}

func startPrivate(t *testing.T) *privateServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if testenv.InCI() {
			t.Fatalf("redis-server not on PATH: %v", err)
		}
		t.Skipf("redis-server not on PATH: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	s := &privateServer{port: port, dir: t.TempDir()}
	s.start(t)
	t.Cleanup(s.stop)
	return s
}

func (s *privateServer) URL() string { return "redis://127.0.0.1:" + s.port + "/0" }

func (s *privateServer) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command("redis-server", "--port", s.port, "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "yes", "--appendfsync", "always", "--dir", s.dir, "--daemonize", "no", "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+s.port, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("private redis-server on port %s did not start: %v", s.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *privateServer) stop() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

func (s *privateServer) restart(t *testing.T) {
	s.stop()
	s.start(t)
}

// --- the conformance suite: on the shared server, and on a private one
// that the suite restarts

func TestConformance(t *testing.T) {
	url := testenv.Require(t, testenv.Redis)
	brokertest.Run(t, harness("redisbroker", url, nil))
}

func TestConformanceNoDedup(t *testing.T) {
	url := testenv.Require(t, testenv.Redis)
	h := harness("redisbroker (dedup off)", url, nil)
	h.New = func(t *testing.T, topic string) (broker.Broker, brokertest.Receiver) {
		c := admin(t, url)
		cleanup(t, c, topic)
		return dial(t, url, redisbroker.Config{MaxMessage: testMax, NoDedup: true}), &streamReceiver{c: c, stream: topic}
	}
	brokertest.Run(t, h)
}

func TestConformancePrivateServerRestart(t *testing.T) {
	srv := startPrivate(t)
	h := harness("redisbroker (private server)", srv.URL(), srv.restart)
	brokertest.Run(t, h)
}

// --- Redis-specific behaviour

func TestFieldMapping(t *testing.T) {
	t.Parallel()
	url := testenv.Require(t, testenv.Redis)
	c := admin(t, url)
	stream := uniqueName("rb_fields")
	cleanup(t, c, stream)
	b := dial(t, url, redisbroker.Config{Source: "/billing service"})

	e := event(stream, 0)
	e.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.FixedZone("CET", 3600))
	e.Key = "order 42 ü"
	e.Type = "OrderPaid"
	e.AggregateType = "Order"
	e.SchemaVersion = 3
	e.ContentType = "application/json; charset=utf-8"
	e.Payload = []byte{0, 1, 2, 0xff, 'x'}
	e.Headers = map[string]string{"traceparent": "00-abc-def-01", "Tenant": "acme ✓",
		// reserved by other transports only: Redis delivers them, prefixed
		"ce_type": "kept", "x-death": "kept", "webhook-id": "kept"}
	forged := event(stream, 1)
	forged.Headers = map[string]string{"Content-Type": "text/plain"}
	res := b.PublishResults(ctxFor(t, 10*time.Second), []outbox.Event{e, forged})
	if res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	if !broker.IsPermanent(res[1].Err) || !errors.Is(res[1].Err, outbox.ErrReservedHeader) {
		t.Errorf("Content-Type header: %v; want a permanent ErrReservedHeader", res[1].Err)
	}
	msgs, err := c.XRange(ctxFor(t, 5*time.Second), stream, "-", "+").Result()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("XRANGE: %v, %v; want one entry", msgs, err)
	}
	if msgs[0].ID != res[0].ID || res[0].Stream != stream || res[0].Duplicate {
		t.Errorf("result %+v; the entry is %s", res[0], msgs[0].ID)
	}
	want := map[string]string{
		"data":             string(e.Payload),
		"ce_id":            e.EventID,
		"ce_source":        "/billing service",
		"ce_specversion":   "1.0",
		"ce_type":          "OrderPaid",
		"ce_time":          "2026-01-02T02:04:05.6Z",
		"content_type":     "application/json; charset=utf-8",
		"key":              "order 42 ü",
		"ce_schemaversion": "3",
		"ce_aggregatetype": "Order",
		"h:traceparent":    "00-abc-def-01",
		"h:Tenant":         "acme ✓",
		"h:ce_type":        "kept",
		"h:x-death":        "kept",
		"h:webhook-id":     "kept",
	}
	got := msgs[0].Values
	for k, v := range want {
		if got[k] != v {
			t.Errorf("field %q = %q, want %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected field %q = %q", k, got[k])
		}
	}
	// The fields come in a fixed order, data first.
	raw, err := c.Do(ctxFor(t, 5*time.Second), "XRANGE", stream, "-", "+").Slice()
	if err != nil {
		t.Fatal(err)
	}
	fields := raw[0].([]any)[1].([]any)
	if fields[0] != "data" || fields[2] != "ce_id" {
		t.Errorf("fields start %v, want data then ce_id", fields[:4])
	}
}

// An event published again (a relay that crashed after XADD, before its
// ack reached the database) is recognised inside the dedup window: it is
// confirmed as a duplicate with the entry id it was first stored under,
// and the stream holds it once, also when the copies race from two
// brokers or sit in one batch.
func TestRepublishedEventIsDuplicate(t *testing.T) {
	t.Parallel()
	url := testenv.Require(t, testenv.Redis)
	c := admin(t, url)
	stream := uniqueName("rb_dedup")
	cleanup(t, c, stream)
	b1 := dial(t, url, redisbroker.Config{})
	b2 := dial(t, url, redisbroker.Config{})

	e := event(stream, 0)
	first := b1.PublishResults(ctxFor(t, 10*time.Second), []outbox.Event{e})[0]
	if first.Err != nil || first.Duplicate || first.ID == "" {
		t.Fatalf("first publish: %+v", first)
	}
	again := b2.PublishResults(ctxFor(t, 10*time.Second), []outbox.Event{e, e})
	for i, r := range again {
		if r.Err != nil || !r.Duplicate || r.ID != first.ID {
			t.Errorf("republish %d: %+v; want a duplicate of %s", i, r, first.ID)
		}
	}
	var wg sync.WaitGroup
	racing := event(stream, 1)
	ids := make([]broker.Result, 8)
	for i := range ids {
		wg.Go(func() {
			b := b1
			if i%2 == 1 {
				b = b2
			}
			ids[i] = b.PublishResults(ctxFor(t, 10*time.Second), []outbox.Event{racing})[0]
		})
	}
	wg.Wait()
	added := 0
	for i, r := range ids {
		if r.Err != nil || r.ID != ids[0].ID {
			t.Errorf("racing publish %d: %+v", i, r)
		}
		if !r.Duplicate {
			added++
		}
	}
	if added != 1 {
		t.Errorf("%d racing publishes said they added the event; want exactly 1", added)
	}
	if n, _ := c.XLen(ctxFor(t, 5*time.Second), stream).Result(); n != 2 {
		t.Errorf("the stream holds %d entries, want 2", n)
	}
	// The ids are remembered in one hash per quarter of the window (6h of
	// the 24h default), which expires a window after its quarter ends.
	slice := int64(6 * 3600)
	bucket := fmt.Sprintf("%s{%s}:%d:%d", redisbroker.DefaultDedupPrefix, stream, slice, time.Now().Unix()/slice)
	if id, err := c.HGet(ctxFor(t, 5*time.Second), bucket, e.EventID).Result(); err != nil || id != first.ID {
		t.Errorf("dedup hash %s holds %q for the event (%v); want %s", bucket, id, err, first.ID)
	}
	ttl, err := c.TTL(ctxFor(t, 5*time.Second), bucket).Result()
	if err != nil || ttl <= 24*time.Hour || ttl > 30*time.Hour {
		t.Errorf("dedup hash TTL %v (%v); want between the 24h window and 30h", ttl, err)
	}

	// Without dedup the same event is simply added again (at least once).
	plain := dial(t, url, redisbroker.Config{NoDedup: true})
	r := plain.PublishResults(ctxFor(t, 10*time.Second), []outbox.Event{e})[0]
	if r.Err != nil || r.Duplicate || r.ID == first.ID {
		t.Errorf("NoDedup republish: %+v", r)
	}
}

// A server that lost the script (restart, SCRIPT FLUSH) gets it again;
// on a private server, since SCRIPT FLUSH is server-wide.
func TestScriptFlushedIsReloaded(t *testing.T) {
	t.Parallel()
	srv := startPrivate(t)
	c := admin(t, srv.URL())
	b := dial(t, srv.URL(), redisbroker.Config{})
	stream := uniqueName("rb_flush")
	for round := range 3 {
		if err := c.ScriptFlush(ctxFor(t, 5*time.Second)).Err(); err != nil {
			t.Fatal(err)
		}
		events := []outbox.Event{event(stream, 2*round), event(stream, 2*round+1)}
		for i, r := range b.PublishResults(ctxFor(t, 10*time.Second), events) {
			if r.Err != nil || r.Duplicate {
				t.Fatalf("round %d, event %d after SCRIPT FLUSH: %+v", round, i, r)
			}
		}
	}
	if n, _ := c.XLen(ctxFor(t, 5*time.Second), stream).Result(); n != 6 {
		t.Errorf("the stream holds %d entries, want 6", n)
	}
}

func TestMaxLenTrims(t *testing.T) {
	t.Parallel()
	url := testenv.Require(t, testenv.Redis)
	c := admin(t, url)
	stream := uniqueName("rb_maxlen")
	cleanup(t, c, stream)
	for _, noDedup := range []bool{false, true} {
		b := dial(t, url+"?maxlen=100&dedup="+map[bool]string{false: "1h", true: "off"}[noDedup], redisbroker.Config{})
		for k := range 10 {
			events := make([]outbox.Event, 100)
			for i := range events {
				events[i] = event(stream, k*100+i)
			}
			for i, err := range b.Publish(ctxFor(t, 10*time.Second), events) {
				if err != nil {
					t.Fatalf("batch %d, event %d: %v", k, i, err)
				}
			}
		}
		n, err := c.XLen(ctxFor(t, 5*time.Second), stream).Result()
		if err != nil || n < 100 || n > 300 {
			t.Errorf("noDedup %v: after 1,000 events with maxlen=100 the stream holds %d (%v); want about 100 (trimming is approximate)", noDedup, n, err)
		}
	}
}

func TestWrongTypeIsPermanentAndAlone(t *testing.T) {
	t.Parallel()
	url := testenv.Require(t, testenv.Redis)
	c := admin(t, url)
	stream, notStream := uniqueName("rb_good"), uniqueName("rb_string")
	cleanup(t, c, stream)
	cleanup(t, c, notStream)
	if err := c.Set(ctxFor(t, 5*time.Second), notStream, "x", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	for _, noDedup := range []bool{false, true} {
		b := dial(t, url, redisbroker.Config{NoDedup: noDedup})
		empty := event("", 3)
		res := b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{event(stream, 0), event(notStream, 1), event(stream, 2), empty})
		if res[0] != nil || res[2] != nil {
			t.Errorf("noDedup %v: good events failed: %v, %v", noDedup, res[0], res[2])
		}
		if !broker.IsPermanent(res[1]) || !errors.Is(res[1], redisbroker.ErrNotStream) || !strings.Contains(res[1].Error(), notStream) {
			t.Errorf("noDedup %v: a topic naming a string key: %v; want a permanent ErrNotStream naming the key", noDedup, res[1])
		}
		if !broker.IsPermanent(res[3]) || !errors.Is(res[3], redisbroker.ErrInvalidTopic) {
			t.Errorf("noDedup %v: an empty topic: %v; want a permanent ErrInvalidTopic", noDedup, res[3])
		}
	}
}

func TestUnreachableIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := startPrivate(t)
	b := dial(t, srv.URL(), redisbroker.Config{Timeout: 2 * time.Second})
	srv.stop()
	start := time.Now()
	res := b.Publish(ctxFor(t, 5*time.Second), []outbox.Event{event("rb_gone", 0), event("rb_gone", 1)})
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Publish to a stopped server took %v", d)
	}
	for i, err := range res {
		if err == nil || broker.IsPermanent(err) || !errors.Is(err, broker.ErrUnavailable) {
			t.Errorf("result %d with the server gone: %v; want a transient ErrUnavailable", i, err)
		}
	}
}

// A server that accepts the connection and never answers: Publish ends at
// its Timeout with transient errors.
func TestHangingServerHonoursTimeout(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept() // and never answer
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	defer func() {
		l.Close()
		for c := range accepted {
			c.Close()
		}
	}()
	// RESP2 and no identity: the first command the server sees is the
	// pipeline itself, which it never answers.
	rdb := redis.NewClient(&redis.Options{Addr: l.Addr().String(), Protocol: 2, DisableIdentity: true, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	b, err := redisbroker.New(rdb, redisbroker.Config{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	start := time.Now()
	res := b.Publish(context.Background(), []outbox.Event{event("rb_hang", 0)})
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Publish took %v with a 300ms Timeout", d)
	}
	if err := res[0]; err == nil || broker.IsPermanent(err) {
		t.Errorf("result = %v; want a transient error", err)
	}
}

func TestConfigAndURLErrors(t *testing.T) {
	t.Parallel()
	for _, cfg := range []redisbroker.Config{{Timeout: -1}, {MaxLen: -1}, {DedupWindow: -time.Second}, {DedupWindow: time.Millisecond}, {MaxMessage: -1}, {Source: "a\x00b"}} {
		rdb := redis.NewClient(&redis.Options{})
		if _, err := redisbroker.New(rdb, cfg); err == nil {
			t.Errorf("New with %+v succeeded", cfg)
		}
		_ = rdb.Close()
	}
	if _, err := redisbroker.New(nil, redisbroker.Config{}); err == nil {
		t.Error("New(nil) succeeded")
	}
	closed := func() string {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		defer l.Close()
		return l.Addr().String()
	}()
	for _, c := range []struct{ url, says string }{
		{"redis://:S3CRETPW@" + closed + "/0?maxlen=lots", "maxlen"},
		{"redis://:S3CRETPW@" + closed + "/0?dedup=forever", "dedup"},
		{"redis://:S3CRETPW@" + closed + "/0?timeout=-1s", "timeout"},
		{"redis://:S3CRETPW@" + closed + "/0?bogus=1", "bogus"},
		{"redis://:S3CRETPW@" + closed + "/x", "database"},
		{"redis://alice:S3CRETPW@" + closed + "/0", closed},
		{"http://:S3CRETPW@" + closed, "scheme"},
	} {
		_, err := redisbroker.Dial(c.url, redisbroker.Config{Timeout: time.Second})
		if err == nil || strings.Contains(err.Error(), "S3CRETPW") || !strings.Contains(err.Error(), c.says) {
			t.Errorf("Dial(%s) = %v; want an error saying %q without the password", c.url, err, c.says)
		}
	}
}

func TestWrongPasswordHidden(t *testing.T) {
	t.Parallel()
	srv := startPrivate(t)
	c := admin(t, srv.URL())
	if err := c.ConfigSet(ctxFor(t, 5*time.Second), "requirepass", "RIGHTPW").Err(); err != nil {
		t.Fatal(err)
	}
	u := "redis://:WRONGPW@127.0.0.1:" + srv.port + "/0"
	_, err := redisbroker.Dial(u, redisbroker.Config{Timeout: 2 * time.Second})
	if err == nil || strings.Contains(err.Error(), "WRONGPW") || !errors.Is(err, broker.ErrRefused) {
		t.Errorf("Dial with a wrong password: %v", err)
	}
	b := dial(t, "redis://:RIGHTPW@127.0.0.1:"+srv.port+"/0", redisbroker.Config{})
	if res := b.Publish(ctxFor(t, 5*time.Second), []outbox.Event{event("rb_auth", 0)}); res[0] != nil {
		t.Errorf("publish with the right password: %v", res[0])
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	b, err := redisbroker.New(redis.NewClient(&redis.Options{}), redisbroker.Config{MaxMessage: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Client().Close()
	var ve *outbox.ValidationError
	if err := b.Check(outbox.Message{Type: "T"}.Normalized()); !errors.As(err, &ve) || ve.Field != "Topic" {
		t.Errorf("Check of an empty topic = %v", err)
	}
	if err := b.Check(outbox.Message{Topic: "s", Type: "T", Headers: map[string]string{"content-type": "x"}}.Normalized()); !errors.Is(err, outbox.ErrReservedHeader) {
		t.Errorf("Check of a Content-Type header = %v", err)
	}
	if err := b.Check(outbox.Message{Topic: "s", Type: "T", Headers: map[string]string{"ce_type": "x", "x-death": "y"}}.Normalized()); err != nil {
		t.Errorf("Check of headers only other transports reserve = %v", err)
	}
	// The largest payload Check accepts is what Publish accepts.
	lo, hi := 0, 1000
	m := outbox.Message{Topic: "s", Key: "k", Type: "T", Payload: nil}.Normalized()
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		m.Payload = make([]byte, mid)
		if b.Check(m) == nil {
			lo = mid
		} else {
			hi = mid
		}
	}
	m.Payload = make([]byte, hi)
	if err := b.Check(m); !errors.Is(err, outbox.ErrPayloadTooLarge) {
		t.Errorf("Check of %d bytes = %v", hi, err)
	}
	if 1000-lo > 250 {
		t.Errorf("Check leaves %d of 1000 bytes for the fields; it should count them", 1000-lo)
	}
	e := outbox.Event{ID: 1, CreatedAt: time.Now(), Message: m}
	e.Payload = make([]byte, lo+60) // over the limit even with a short ce_time
	if res := b.Publish(ctxFor(t, 5*time.Second), []outbox.Event{e}); !broker.IsPermanent(res[0]) || !errors.Is(res[0], outbox.ErrPayloadTooLarge) {
		t.Errorf("publish of a too-large event = %v", res[0])
	}
}

// An id is remembered across the slices of the window, for at least the
// window and not much longer: with a 4s window (1s slices) a republish
// after 2.5s is a duplicate, one after 6.5s adds the event again.
func TestDedupWindowSlices(t *testing.T) {
	t.Parallel()
	url := testenv.Require(t, testenv.Redis)
	c := admin(t, url)
	stream := uniqueName("rb_window")
	cleanup(t, c, stream)
	b := dial(t, url, redisbroker.Config{DedupWindow: 4 * time.Second})
	e := event(stream, 0)
	first := b.PublishResults(ctxFor(t, 5*time.Second), []outbox.Event{e})[0]
	start := time.Now()
	time.Sleep(2500 * time.Millisecond)
	if r := b.PublishResults(ctxFor(t, 5*time.Second), []outbox.Event{e})[0]; r.Err != nil || !r.Duplicate || r.ID != first.ID {
		t.Errorf("republish within the window: %+v", r)
	}
	time.Sleep(6500*time.Millisecond - time.Since(start))
	if r := b.PublishResults(ctxFor(t, 5*time.Second), []outbox.Event{e})[0]; r.Err != nil || r.Duplicate {
		t.Errorf("republish after 1.25 windows and a slice: %+v; want it added again", r)
	}
}
