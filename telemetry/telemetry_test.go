package telemetry_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/telemetry"
	"github.com/outbox-go/outbox/testkit/teststores"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wired is a relay with metrics and health endpoints, as `outbox relay
// --metrics-addr` runs it.
type wired struct {
	st  driver.Store
	mb  *membroker.Broker
	srv *httptest.Server
}

func start(t *testing.T, kind string, stallAfter, grace time.Duration) wired {
	t.Helper()
	st := teststores.Open(t, kind, store.Options{}).Store
	mb, err := membroker.New(membroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	metrics := telemetry.NewMetrics(telemetry.MetricsConfig{})
	r, err := relay.New(st, mb, relay.Config{
		Hooks: []relay.Hook{metrics}, PollInterval: 20 * time.Millisecond, LeaseFor: 2 * time.Second,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, DrainTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	state := telemetry.NewState(r, st)
	reg.MustRegister(metrics, state)
	h, err := telemetry.Handler(telemetry.HandlerConfig{Gatherer: reg, State: state, StallAfter: stallAfter, Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; srv.Close() })
	return wired{st: st, mb: mb, srv: srv}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
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

func TestMetricsCountWhatTheRelayDid(t *testing.T) {
	for _, kind := range teststores.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			w := start(t, kind, time.Minute, time.Minute)
			var msgs []outbox.Message
			for i := range 7 {
				msgs = append(msgs, outbox.Message{Topic: "orders.paid", Key: "k" + string(rune('a'+i%3)), Type: "OrderPaid", Payload: []byte("{}")})
			}
			if err := w.st.Enqueue(context.Background(), msgs...); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "7 deliveries", 20*time.Second, func() bool { return len(w.mb.Events("orders.paid")) == 7 })
			want := []string{
				`outbox_events_published_total{topic="orders.paid"} 7`,
				`outbox_events_settled_total{outcome="delivered"} 7`,
				`outbox_pending_events 0`,
				`outbox_dead_events 0`,
				`outbox_in_flight_events 0`,
				`outbox_inflight_bytes 0`,
				`outbox_store_up 1`,
				`outbox_broker_up 1`,
				`outbox_delivery_latency_seconds_count 7`,
			}
			var body string
			waitFor(t, "the metrics to show the deliveries", 10*time.Second, func() bool {
				_, body = get(t, w.srv.URL+"/metrics")
				for _, line := range want {
					if !strings.Contains(body, line+"\n") {
						return false
					}
				}
				return true
			})
			if strings.Contains(body, "outbox_last_delivery_timestamp_seconds 0\n") {
				t.Errorf("last delivery timestamp is 0 after deliveries")
			}
			if code, body := get(t, w.srv.URL+"/healthz"); code != 200 || body != "ok\n" {
				t.Errorf("/healthz = %d %q", code, body)
			}
		})
	}
}

// The stall test: the broker goes away while events wait. /readyz turns
// 503 once the oldest event is older than StallAfter (and the broker has
// failed longer than Grace), names why, and turns 200 again once
// delivery resumes.
func TestReadyzFailsWhenDeliveryStalls(t *testing.T) {
	w := start(t, "sqlite", 400*time.Millisecond, 300*time.Millisecond)
	if code, body := get(t, w.srv.URL+"/readyz"); code != 200 {
		t.Fatalf("/readyz of an idle relay = %d %q", code, body)
	}
	w.mb.SetDown(true)
	if err := w.st.Enqueue(context.Background(), outbox.Message{Topic: "t", Key: "k", Type: "T", Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	var body string
	waitFor(t, "/readyz to report the stall", 10*time.Second, func() bool {
		var code int
		code, body = get(t, w.srv.URL+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "delivery stalled") && strings.Contains(body, "broker failing")
	})
	t.Logf("/readyz while stalled:\n%s", body)
	if _, m := get(t, w.srv.URL+"/metrics"); !strings.Contains(m, "outbox_broker_up 0\n") || !strings.Contains(m, "outbox_pending_events 1\n") {
		t.Errorf("metrics while stalled do not show it:\n%s", m)
	}
	w.mb.SetDown(false)
	waitFor(t, "/readyz to recover", 10*time.Second, func() bool {
		code, _ := get(t, w.srv.URL+"/readyz")
		return code == 200
	})
}

// An idle relay whose only event is held by its own next attempt (a
// delayed AvailableAt, as a plain-SQL producer's far-future
// next_attempt_at) has nothing it may deliver: /readyz stays 200 long
// past StallAfter, however old the held event grows.
func TestReadyzIdleWithOnlyAHeldEvent(t *testing.T) {
	for _, kind := range teststores.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			w := start(t, kind, 200*time.Millisecond, 100*time.Millisecond)
			if err := w.st.Enqueue(context.Background(), outbox.Message{Topic: "t", Key: "k", Type: "T", Payload: []byte("{}"), AvailableAt: time.Now().Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			// The backlog is read at most once a second: past StallAfter
			// and past two fresh reads.
			for deadline := time.Now().Add(2500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				if code, body := get(t, w.srv.URL+"/readyz"); code != 200 {
					t.Fatalf("/readyz of an idle relay with only a held event = %d %q", code, body)
				}
			}
			if _, m := get(t, w.srv.URL+"/metrics"); !strings.Contains(m, "outbox_pending_events 1\n") || !strings.Contains(m, "outbox_oldest_pending_age_seconds 0\n") {
				t.Errorf("metrics with only a held event:\n%s", m)
			}
		})
	}
}

func TestHandlerRefusesBadConfig(t *testing.T) {
	if _, err := telemetry.Handler(telemetry.HandlerConfig{}); err == nil {
		t.Error("Handler without Gatherer and State: no error")
	}
}

// failingBacklog is a store whose backlog query fails, as during a
// database outage.
type failingBacklog struct{ driver.Store }

func (failingBacklog) Backlog(context.Context) (store.Backlog, error) {
	return store.Backlog{}, errors.New("connection refused")
}

// While the store does not answer, /metrics still answers 200 with what it
// knows (outbox_backlog_up 0 instead of the backlog gauges), and /readyz,
// once the backlog query has failed for longer than Grace (as for a
// failing store or broker), says why it cannot tell.
func TestMetricsSurviveAStoreOutage(t *testing.T) {
	st := failingBacklog{teststores.Open(t, "sqlite", store.Options{}).Store}
	mb, err := membroker.New(membroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(st, mb, relay.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	state := telemetry.NewState(r, st)
	reg.MustRegister(telemetry.NewMetrics(telemetry.MetricsConfig{}), state)
	const grace = 500 * time.Millisecond
	h, err := telemetry.Handler(telemetry.HandlerConfig{Gatherer: reg, State: state, Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	failing := time.Now()
	code, body := get(t, srv.URL+"/readyz")
	if time.Since(failing) < grace && code != 200 {
		t.Errorf("/readyz as the backlog starts failing, within the grace = %d %q, want 200", code, body)
	}
	code, body = get(t, srv.URL+"/metrics")
	if code != 200 || !strings.Contains(body, "outbox_backlog_up 0\n") || !strings.Contains(body, "outbox_store_up 1\n") || strings.Contains(body, "outbox_pending_events") {
		t.Errorf("/metrics while the backlog fails = %d:\n%s", code, body)
	}
	time.Sleep(grace + 100*time.Millisecond - time.Since(failing))
	if code, body := get(t, srv.URL+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "backlog unknown for") || !strings.Contains(body, "the store did not answer") {
		t.Errorf("/readyz while the backlog fails past the grace = %d %q", code, body)
	}
}

// A process that serves its endpoints before it reached its database and
// broker answers /readyz 503 naming what it waits for (secrets masked),
// serves the gauges it can, and turns ready once the relay is attached.
func TestReadyzWhileStarting(t *testing.T) {
	state := telemetry.NewState(nil, nil)
	metrics := telemetry.NewMetrics(telemetry.MetricsConfig{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics, state)
	h, err := telemetry.Handler(telemetry.HandlerConfig{Gatherer: reg, State: state})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	ready := func(want ...string) {
		t.Helper()
		code, body := get(t, srv.URL+"/readyz")
		if code != http.StatusServiceUnavailable {
			t.Errorf("/readyz = %d %q, want 503", code, body)
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("/readyz %q does not say %q", body, w)
			}
		}
		if strings.Contains(body, "s3cret") {
			t.Errorf("/readyz shows a password: %q", body)
		}
	}
	ready("starting: connecting to the database")
	state.Connecting(telemetry.ComponentStore, errors.New("pgstore: cannot reach postgres://u:s3cret@127.0.0.1:1/db: connection refused"))
	ready("starting: the database is unreachable", "connection refused", "retrying")
	if code, body := get(t, srv.URL+"/metrics"); code != 200 || !strings.Contains(body, "outbox_store_up 0\n") || !strings.Contains(body, "outbox_broker_up 0\n") {
		t.Errorf("/metrics while starting = %d:\n%s", code, body)
	}
	if code, _ := get(t, srv.URL+"/healthz"); code != 200 {
		t.Errorf("/healthz while starting = %d", code)
	}

	st := teststores.Open(t, "sqlite", store.Options{}).Store
	state.Connecting(telemetry.ComponentStore, nil)
	state.SetStore(st)
	ready("starting: connecting to the broker")
	state.Connecting(telemetry.ComponentBroker, errors.New("nats: no servers available for connection"))
	ready("starting: the broker is unreachable", "no servers available")
	if _, body := get(t, srv.URL+"/metrics"); !strings.Contains(body, "outbox_store_up 1\n") || !strings.Contains(body, "outbox_broker_up 0\n") || !strings.Contains(body, "outbox_pending_events 0\n") {
		t.Errorf("/metrics with the store reached:\n%s", body)
	}
	state.Connecting(telemetry.ComponentBroker, nil)
	ready("starting: the relay is not running yet")

	mb, err := membroker.New(membroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(st, mb, relay.Config{Hooks: []relay.Hook{metrics}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	state.SetRelay(r)
	if code, body := get(t, srv.URL+"/readyz"); code != 200 {
		t.Errorf("/readyz with the relay attached = %d %q", code, body)
	}
}

// outbox_ready follows /readyz.
func TestReadyGaugeFollowsReadyz(t *testing.T) {
	w := start(t, "sqlite", 300*time.Millisecond, 200*time.Millisecond)
	waitFor(t, "outbox_ready 1", 10*time.Second, func() bool { _, m := get(t, w.srv.URL+"/metrics"); return strings.Contains(m, "outbox_ready 1\n") })
	w.mb.SetDown(true)
	if err := w.st.Enqueue(context.Background(), outbox.Message{Topic: "t", Key: "k", Type: "T", Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "outbox_ready 0", 10*time.Second, func() bool {
		code, _ := get(t, w.srv.URL+"/readyz")
		_, m := get(t, w.srv.URL+"/metrics")
		return code == http.StatusServiceUnavailable && strings.Contains(m, "outbox_ready 0\n")
	})
	w.mb.SetDown(false)
	waitFor(t, "outbox_ready 1 again", 10*time.Second, func() bool { _, m := get(t, w.srv.URL+"/metrics"); return strings.Contains(m, "outbox_ready 1\n") })
}

// The published counter adds a run of events of one topic at once: mixed
// topics, a failure in a run and a missing result still count each event
// under its own topic.
func TestMetricsCountPublishedByTopic(t *testing.T) {
	m := telemetry.NewMetrics(telemetry.MetricsConfig{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	var events []outbox.Event
	for _, topic := range []string{"a", "a", "b", "a", "a", "c", "c"} {
		events = append(events, outbox.Event{Message: outbox.Message{Topic: topic, Type: "T"}, CreatedAt: time.Now()})
	}
	results := make([]broker.Result, len(events)-1) // no result for the last c
	results[3].Err = broker.Permanentf("too large")
	m.OnPublishEnd(context.Background(), relay.PublishInfo{Events: events, Results: results})
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "outbox_events_published_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			got[mt.GetLabel()[0].GetValue()] = mt.GetCounter().GetValue()
		}
	}
	if want := map[string]float64{"a": 3, "b": 1, "c": 1}; !maps.Equal(got, want) {
		t.Errorf("published by topic = %v, want %v", got, want)
	}
}
