package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/dashboard"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testToken = "s3cret-token-for-tests"

// rig is a running relay over a real store, with its dashboard served.
type rig struct {
	st  store.Store
	mb  *membroker.Broker
	r   *relay.Relay
	srv *httptest.Server
}

// poison makes the broker refuse, permanently, every event whose key is in
// keys (as a broker refuses an event it cannot route).
func poison(mb *membroker.Broker, keys ...string) {
	mb.SetHook(func(e outbox.Event) error {
		for _, k := range keys {
			if e.Key == k {
				return broker.Permanentf("membroker: no route for key %s", k)
			}
		}
		return nil
	})
}

func start(t *testing.T, kind, token string) rig {
	t.Helper()
	return startWith(t, kind, token, 0, 50*time.Millisecond)
}

// startWith is start with a relay batch size (0: default) and a sampling
// interval.
func startWith(t *testing.T, kind, token string, batch int, sampleEvery time.Duration) rig {
	t.Helper()
	st := teststores.Open(t, kind, store.Options{}).Store
	mb, err := membroker.New(membroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := relay.New(st, mb, relay.Config{BatchSize: batch, PollInterval: 20 * time.Millisecond, LeaseFor: 2 * time.Second,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, DrainTimeout: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(dashboard.Config{Store: st, Relay: r, Token: token, SampleEvery: sampleEvery, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; srv.Close(); d.Close() })
	return rig{st: st, mb: mb, r: r, srv: srv}
}

type reply struct {
	code int
	body string
	json map[string]any
}

func (g rig) do(t *testing.T, method, path, token, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, g.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	rp := reply{code: resp.StatusCode, body: string(b)}
	_ = json.Unmarshal(b, &rp.json)
	return rp
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deadIDs lists the ids the API shows as dead.
func (g rig) deadIDs(t *testing.T) []int64 {
	t.Helper()
	rp := g.do(t, "GET", "/api/dead?limit=200", "", "")
	if rp.code != 200 {
		t.Fatalf("GET /api/dead = %d %s", rp.code, rp.body)
	}
	var out []int64
	for _, e := range rp.json["events"].([]any) {
		out = append(out, int64(e.(map[string]any)["id"].(float64)))
	}
	return out
}

func enqueue(t *testing.T, st store.Store, msgs ...outbox.Message) {
	t.Helper()
	if err := st.Enqueue(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
}

func msg(key, payload string) outbox.Message {
	return outbox.Message{Topic: "orders.paid", Key: key, Type: "OrderPaid", Payload: []byte(payload)}
}

// Bad input never gets a 500 or a panic: each gets a 4xx naming what is
// wrong.
func TestAPIRefusesBadInput(t *testing.T) {
	g := start(t, "sqlite", testToken)
	poison(g.mb, "bad")
	enqueue(t, g.st, msg("bad", `{}`))
	waitFor(t, "a dead event", 10*time.Second, func() bool { return len(g.deadIDs(t)) == 1 })
	id := itoa(g.deadIDs(t)[0])
	for _, c := range []struct {
		method, path, token, body string
		code                      int
		says                      string
	}{
		{"GET", "/api/dead/999999999", "", "", 404, "no such event"},
		{"GET", "/api/dead/abc", "", "", 400, "not an event id"},
		{"GET", "/api/dead/-4", "", "", 400, "not an event id"},
		{"GET", "/api/dead?limit=100000", "", "", 400, "from 1 to 200"},
		{"GET", "/api/dead?limit=0", "", "", 400, "from 1 to 200"},
		{"GET", "/api/dead?after=x", "", "", 400, "give an event id"},
		{"GET", "/api/nope", "", "", 404, "no such API endpoint"},
		{"POST", "/api/overview", "", "", 405, "use GET"},
		{"GET", "/api/dead/" + id + "/retry", "", "", 405, "use POST"},
		{"DELETE", "/api/purge", testToken, "", 405, "use POST"},
		{"POST", "/api/dead/" + id + "/retry", "", "", 401, "Authorization: Bearer"},
		{"POST", "/api/dead/" + id + "/retry", "wrong", "", 401, "wrong token"},
		{"POST", "/api/dead/" + id + "/skip", testToken + "x", "", 401, "wrong token"},
		{"POST", "/api/purge", "", `{"older_than":"0s"}`, 401, "token"},
		{"POST", "/api/dead/999999999/retry", testToken, "", 404, "no such event"},
		{"POST", "/api/dead/0/skip", testToken, "", 400, "not an event id"},
		{"POST", "/api/purge", testToken, "", 415, "JSON body"},
		{"POST", "/api/purge", testToken, `{"older_than":"soon"}`, 400, "not a duration"},
		{"POST", "/api/purge", testToken, `{"topic":"t"}`, 400, "older_than is required"},
		{"POST", "/api/purge", testToken, `{"older_than":"0s","what":1}`, 400, "is not"},
		{"POST", "/api/purge", testToken, `{"older_than":"` + strings.Repeat("9", 5000) + `"}`, 400, "at most 4 KiB"},
		{"PUT", "/", "", "", 405, "use GET"},
		{"GET", "/secret.txt", "", "", 404, "no such page"},
	} {
		rp := g.do(t, c.method, c.path, c.token, c.body)
		if rp.code != c.code || !strings.Contains(rp.body, c.says) {
			t.Errorf("%s %s (token %q): %d %s; want %d saying %q", c.method, c.path, c.token, rp.code, strings.TrimSpace(rp.body), c.code, c.says)
		}
	}
	if ids := g.deadIDs(t); len(ids) != 1 {
		t.Errorf("after the refused requests the dead events are %v; want the one, untouched", ids)
	}
	// A token in a query string or a cookie is not a token.
	req, _ := http.NewRequest("POST", g.srv.URL+"/api/dead/"+id+"/retry?token="+testToken, nil)
	req.AddCookie(&http.Cookie{Name: "token", Value: testToken})
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("retry with the token as a cookie and query parameter: %d; want 401", resp.StatusCode)
	}
}

// Without a token the dashboard reads but refuses every action with 403,
// saying how to enable them.
func TestReadOnlyWithoutToken(t *testing.T) {
	g := start(t, "sqlite", "")
	poison(g.mb, "bad")
	enqueue(t, g.st, msg("bad", `{}`))
	waitFor(t, "a dead event", 10*time.Second, func() bool { return len(g.deadIDs(t)) == 1 })
	id := itoa(g.deadIDs(t)[0])
	for _, p := range []string{"/api/dead/" + id + "/retry", "/api/dead/" + id + "/skip"} {
		if rp := g.do(t, "POST", p, "anything", ""); rp.code != 403 || !strings.Contains(rp.body, "read-only") {
			t.Errorf("POST %s on a read-only dashboard: %d %s; want 403 saying it is read-only", p, rp.code, rp.body)
		}
	}
	rp := g.do(t, "GET", "/api/overview", "", "")
	if rp.code != 200 || rp.json["actions"] != false || !strings.Contains(rp.json["read_only_hint"].(string), "token") {
		t.Errorf("overview of a read-only dashboard: %d %s", rp.code, rp.body)
	}
}

// Retry, skip and purge do what they say, on every store.
func TestActions(t *testing.T) {
	for _, kind := range teststores.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			g := start(t, kind, testToken)
			poison(g.mb, "a", "b", "c", "d")
			enqueue(t, g.st, msg("a", `{"n":1}`), msg("b", `{"n":2}`), msg("c", `{"n":3}`), msg("d", `{"n":4}`))
			waitFor(t, "4 dead events", 20*time.Second, func() bool { return len(g.deadIDs(t)) == 4 })
			ids := g.deadIDs(t)
			// b's later event waits behind the dead one (the relay holds keys).
			enqueue(t, g.st, msg("b", `{"n":5}`))
			waitFor(t, "the overview to list the held keys", 10*time.Second, func() bool {
				rp := g.do(t, "GET", "/api/overview", "", "")
				held, _ := rp.json["held_keys"].([]any)
				return len(held) == 4
			})

			poison(g.mb) // the broker is fixed
			if rp := g.do(t, "POST", "/api/dead/"+itoa(ids[0])+"/retry", testToken, ""); rp.code != 200 || rp.json["requeued"] != 1.0 {
				t.Fatalf("retry: %d %s", rp.code, rp.body)
			}
			waitFor(t, "the retried event to be delivered", 10*time.Second, func() bool { return len(g.mb.Events("orders.paid")) == 1 })
			if got := g.mb.Events("orders.paid")[0]; got.ID != ids[0] || string(got.Payload) != `{"n":1}` {
				t.Errorf("delivered %d %s; want event %d", got.ID, got.Payload, ids[0])
			}
			if rp := g.do(t, "POST", "/api/dead/"+itoa(ids[0])+"/retry", testToken, ""); rp.code != 404 && rp.code != 409 {
				t.Errorf("retrying a delivered event: %d %s; want 404 or 409", rp.code, rp.body)
			}

			rp := g.do(t, "POST", "/api/dead/"+itoa(ids[1])+"/skip", testToken, "")
			if rp.code != 200 || rp.json["skipped"] != 1.0 {
				t.Fatalf("skip: %d %s", rp.code, rp.body)
			}
			if ev := rp.json["event"].(map[string]any); ev["key"] != "b" || ev["payload_base64"] != "eyJuIjoyfQ==" {
				t.Errorf("skip's answer does not carry the whole event: %v", ev)
			}
			// b's later event flows; the skipped one is gone, not delivered.
			waitFor(t, "b's later event", 10*time.Second, func() bool { return len(g.mb.Events("orders.paid")) == 2 })
			if got := g.mb.Events("orders.paid")[1]; string(got.Payload) != `{"n":5}` {
				t.Errorf("after skipping b's dead event, delivered %s; want b's later event", got.Payload)
			}
			if _, err := g.st.Get(context.Background(), ids[1]); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("the skipped event: %v; want it deleted", err)
			}

			if rp := g.do(t, "POST", "/api/purge", testToken, `{"older_than":"0s"}`); rp.code != 200 || rp.json["purged"] != 2.0 {
				t.Errorf("purge: %d %s; want 2 purged", rp.code, rp.body)
			}
			if ids := g.deadIDs(t); len(ids) != 0 {
				t.Errorf("dead after purge: %v", ids)
			}
		})
	}
}

// Payloads are user data: the API caps previews, shows binary as hex, and
// its JSON escapes markup.
func TestPayloadPreview(t *testing.T) {
	g := start(t, "sqlite", testToken)
	poison(g.mb, "x", "y", "z")
	big := strings.Repeat("é", 3000) // 6000 bytes
	enqueue(t, g.st,
		msg("x", `<script>alert(1)</script>`),
		outbox.Message{Topic: "orders.paid", Key: "y", Type: "Bin", ContentType: "application/octet-stream", Payload: []byte{0xff, 0x00, 0xfe, 0x41}},
		msg("z", big))
	waitFor(t, "3 dead events", 10*time.Second, func() bool { return len(g.deadIDs(t)) == 3 })
	rp := g.do(t, "GET", "/api/dead", "", "")
	if strings.Contains(rp.body, "<script>") || !strings.Contains(rp.body, `\u003cscript\u003e`) {
		t.Errorf("the JSON carries markup unescaped: %s", rp.body)
	}
	evs := rp.json["events"].([]any)
	p := func(i int) map[string]any { return evs[i].(map[string]any)["payload"].(map[string]any) }
	if p(0)["preview"] != `<script>alert(1)</script>` || p(0)["encoding"] != "text" {
		t.Errorf("text payload preview: %v", p(0))
	}
	if p(1)["preview"] != "ff00fe41" || p(1)["encoding"] != "hex" || p(1)["size"] != 4.0 {
		t.Errorf("binary payload preview: %v", p(1))
	}
	if pv := p(2)["preview"].(string); len(pv) > dashboard.DefaultPreviewBytes || p(2)["truncated"] != true || p(2)["size"] != 6000.0 || !strings.HasPrefix(big, pv) {
		t.Errorf("big payload preview: %d bytes, truncated %v, size %v", len(pv), p(2)["truncated"], p(2)["size"])
	}
	if lastErr := evs[0].(map[string]any)["last_error"].(string); !strings.Contains(lastErr, "no route for key x") {
		t.Errorf("last error %q", lastErr)
	}
	// The page itself: a strict CSP, no inline script.
	resp, err := http.Get(g.srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Errorf("CSP %q", csp)
	}
	if strings.Contains(string(page), "<script>") || strings.Contains(string(page), "http") && strings.Contains(string(page), "cdn") {
		t.Errorf("the page has an inline script or a CDN reference")
	}
}

// The overview shows the backlog and the delivery rate over time, and the
// relay's health.
func TestOverview(t *testing.T) {
	g := start(t, "sqlite", testToken)
	var msgs []outbox.Message
	for i := range 50 {
		msgs = append(msgs, msg("k"+itoa(int64(i%5)), `{}`))
	}
	enqueue(t, g.st, msgs...)
	waitFor(t, "50 deliveries", 20*time.Second, func() bool { return len(g.mb.Events("")) == 50 })
	var rp reply
	waitFor(t, "the samples to show the deliveries", 10*time.Second, func() bool {
		rp = g.do(t, "GET", "/api/overview", "", "")
		relays, _ := rp.json["relays"].([]any)
		if len(relays) != 1 {
			return false
		}
		h := relays[0].(map[string]any)["health"].(map[string]any)
		b, _ := rp.json["backlog"].(map[string]any)
		// the sample after the deliveries carries their rate: wait for it
		// too (the deliveries may all fall before the second sample)
		series, _ := rp.json["series"].([]any)
		rated := false
		for _, p := range series {
			if v, ok := p.(map[string]any)["delivered_per_second"].(float64); ok && v > 0 {
				rated = true
			}
		}
		return h["delivered"] == 50.0 && b != nil && b["pending"] == 0.0 && len(series) >= 2 && rated
	})
	series := rp.json["series"].([]any)
	var delivered float64
	for _, p := range series {
		if v, ok := p.(map[string]any)["delivered_per_second"].(float64); ok {
			delivered += v
		}
	}
	if len(series) < 2 || delivered <= 0 || rp.json["series_has_rates"] != true || rp.json["actions"] != true {
		t.Errorf("overview: %d samples, rates summing to %.1f: %s", len(series), delivered, rp.body)
	}
	h := rp.json["relays"].([]any)[0].(map[string]any)
	if h["owner"] != g.r.Owner() {
		t.Errorf("relay owner %v; want %s", h["owner"], g.r.Owner())
	}
}

// Only IP addresses, localhost and the configured names are answered, so
// that a site whose name was rebound to 127.0.0.1 cannot read the dead
// letters through the operator's browser.
func TestHostCheck(t *testing.T) {
	st := teststores.Open(t, "sqlite", store.Options{}).Store
	for _, c := range []struct {
		hosts []string
		host  string
		code  int
	}{
		{nil, "127.0.0.1:8080", 200},
		{nil, "[::1]:8080", 200},
		{nil, "localhost:8080", 200},
		{nil, "evil.example:8080", 421},
		{nil, "evil.example", 421},
		{[]string{"outbox.internal"}, "OUTBOX.internal:443", 200},
		{[]string{"outbox.internal"}, "evil.example", 421},
		{[]string{"*"}, "evil.example", 200},
	} {
		d, err := dashboard.New(dashboard.Config{Store: st, Hosts: c.hosts})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest("GET", "/api/overview", nil)
		req.Host = c.host
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, req)
		d.Close()
		if rec.Code != c.code {
			t.Errorf("Hosts %v, Host %s: %d %s; want %d", c.hosts, c.host, rec.Code, rec.Body.String(), c.code)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	st := teststores.Open(t, "sqlite", store.Options{}).Store
	for _, c := range []dashboard.Config{
		{},
		{Store: st, SampleEvery: -time.Second},
		{Store: st, History: 1},
		{Store: st, Token: "abc\n"},
		{Store: st, Hosts: []string{"http://x"}},
		{Store: st, Hosts: []string{""}},
	} {
		if d, err := dashboard.New(c); err == nil {
			d.Close()
			t.Errorf("New(%+v): no error", c)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
