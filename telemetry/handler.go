package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outbox-go/outbox/internal/redact"
)

// HandlerConfig configures Handler.
type HandlerConfig struct {
	// Gatherer serves /metrics; required.
	Gatherer prometheus.Gatherer
	// State answers /readyz; required.
	State *State
	// StallAfter: not ready when the oldest due event (see
	// store.Backlog) is older than this and nothing was delivered for this
	// long; default 5m.
	StallAfter time.Duration
	// Grace: not ready when the store or the broker has been failing as a
	// whole, or the backlog query, for longer than this; default 30s.
	Grace time.Duration
}

// Handler serves /metrics, /healthz and /readyz. From then on the State
// also exports outbox_ready, /readyz as a gauge, for alerting.
func Handler(c HandlerConfig) (http.Handler, error) {
	if c.Gatherer == nil || c.State == nil {
		return nil, fmt.Errorf("telemetry: Handler needs a Gatherer and a State")
	}
	if c.StallAfter < 0 || c.Grace < 0 {
		return nil, fmt.Errorf("telemetry: StallAfter and Grace must not be negative (0 means the default)")
	}
	if c.StallAfter == 0 {
		c.StallAfter = 5 * time.Minute
	}
	if c.Grace == 0 {
		c.Grace = 30 * time.Second
	}
	c.State.setReadiness(c.notReady)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(c.Gatherer, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		reasons := c.notReady(r.Context())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if len(reasons) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, strings.Join(reasons, "\n"))
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux, nil
}

// notReady lists why delivery is stalled, or nothing.
func (c HandlerConfig) notReady(ctx context.Context) []string {
	now := time.Now()
	rl, _, _ := c.State.snapshot()
	if rl == nil {
		return c.State.startingReasons(now)
	}
	h := rl.Health()
	var out []string
	if h.StoreError != "" && now.Sub(h.StoreFailingSince) > c.Grace {
		out = append(out, fmt.Sprintf("store failing for %s: %s", now.Sub(h.StoreFailingSince).Round(time.Second), h.StoreError))
	}
	if h.BrokerError != "" && now.Sub(h.BrokerFailingSince) > c.Grace {
		out = append(out, fmt.Sprintf("broker failing for %s: %s", now.Sub(h.BrokerFailingSince).Round(time.Second), h.BrokerError))
	}
	b, ok, err := c.State.Backlog(ctx)
	switch {
	case !ok:
	case err != nil:
		if since := c.State.backlogFailingSince(); !since.IsZero() && now.Sub(since) > c.Grace {
			out = append(out, fmt.Sprintf("backlog unknown for %s: the store did not answer (%s)", now.Sub(since).Round(time.Second), redact.Text(err.Error())))
		}
	case b.OldestPendingAge > c.StallAfter && (h.LastDelivered.IsZero() || now.Sub(h.LastDelivered) > c.StallAfter):
		since := "never delivered"
		if !h.LastDelivered.IsZero() {
			since = fmt.Sprintf("last delivery %s ago", now.Sub(h.LastDelivered).Round(time.Second))
		}
		out = append(out, fmt.Sprintf("delivery stalled: the oldest due event is %s old, %s (about %d waiting)", b.OldestPendingAge.Round(time.Second), since, b.Pending))
	}
	return out
}
