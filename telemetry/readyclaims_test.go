package telemetry_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/telemetry"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// failingClaims is a real store whose every claim fails, as every claim
// did beside a row it could not read (issue 28: created_at 'infinity'),
// while its heartbeats and backlog answer.
type failingClaims struct {
	driver.Store
}

func (failingClaims) Claim(context.Context, driver.ClaimParams) (driver.Claim, error) {
	return driver.Claim{}, errors.New("can't scan into dest[11] (col: created_at): cannot scan Infinity into *time.Time")
}

// When every claim fails, /readyz answers 503 with the claim's error
// within the grace, also while the relay pauses its claims after a failed
// one and its heartbeats succeed. Before the fix a paused claim counted as
// a success: the store "recovered" at once, its failure never lasted
// past the grace, and /readyz answered ready while nothing was delivered.
func TestReadyzFailsWhileClaimsFail(t *testing.T) {
	base := teststores.Open(t, "sqlite", store.Options{}).Store
	st := failingClaims{Store: base}
	if err := st.Enqueue(context.Background(), outbox.Message{Topic: "t", Key: "k", Type: "T", Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	mb, err := membroker.New(membroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const grace = 300 * time.Millisecond
	r, err := relay.New(st, mb, relay.Config{
		PollInterval: 20 * time.Millisecond, LeaseFor: 3 * time.Second,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, DrainTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	state := telemetry.NewState(r, st)
	reg.MustRegister(state)
	h, err := telemetry.Handler(telemetry.HandlerConfig{Gatherer: reg, State: state, StallAfter: time.Hour, Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; srv.Close() })
	// Well within the pause after the first failed claim (LeaseFor·4/3 =
	// 4 s): the answer must not wait for the next claim to fail.
	var body string
	waitFor(t, "/readyz to report the failing claims", 2*time.Second, func() bool {
		var code int
		code, body = get(t, srv.URL+"/readyz")
		return code == http.StatusServiceUnavailable
	})
	if !strings.Contains(body, "store failing") || !strings.Contains(body, "created_at") {
		t.Errorf("/readyz while claims fail says %q; want the store's failure with the claim's error", body)
	}
	// and it stays so: the paused claims are no recovery
	time.Sleep(2 * grace)
	if code, body := get(t, srv.URL+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while claims stay paused after a failure = %d %q; want 503", code, body)
	}
}
