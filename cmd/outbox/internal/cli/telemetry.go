package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/telemetry"
)

// metricsListenAddr checks --metrics-addr and binds a bare :port to
// loopback, so metrics are never exposed by accident.
func metricsListenAddr(raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	host, port, err := net.SplitHostPort(raw)
	if err != nil || port == "" {
		return "", fmt.Errorf("%w: --metrics-addr %q is not host:port (e.g. 127.0.0.1:9464 or :9464)", wire.ErrUsage, raw)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// serveTelemetry serves the relay's metrics and health, as state tells
// them, on addr until the returned stop is called.
// extra are more collectors to register (the pgcdc source's lag).
func serveTelemetry(addr string, state *telemetry.State, m *telemetry.Metrics, stallAfter, grace time.Duration, log *slog.Logger, extra ...prometheus.Collector) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, state, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(extra...)
	h, err := telemetry.Handler(telemetry.HandlerConfig{Gatherer: reg, State: state, StallAfter: stallAfter, Grace: grace})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %v (is another process using the port?)", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("outbox relay: metrics server stopped", "error", err.Error())
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
