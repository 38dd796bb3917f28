package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"context"

	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/dashboard"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
)

// dashboardTokenEnv holds the dashboard's token when --dashboard-token-file
// is not given. The token is never printed or logged.
const dashboardTokenEnv = "OUTBOX_DASHBOARD_TOKEN"

// loopbackAddr checks a host:port flag and binds a bare :port to loopback,
// so that nothing is exposed by accident.
func loopbackAddr(flagName, raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	host, port, err := net.SplitHostPort(raw)
	if err != nil || port == "" {
		return "", fmt.Errorf("%w: --%s %q is not host:port (e.g. 127.0.0.1:8080 or :8080)", wire.ErrUsage, flagName, raw)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// dashboardToken reads the token from file (trailing white space trimmed),
// or else from OUTBOX_DASHBOARD_TOKEN; "" means read-only. Either must be
// one word of at least 16 characters. warning is set when the file can be
// read by its group or others.
func dashboardToken(file string) (tok, warning string, err error) {
	from := dashboardTokenEnv
	if file == "" {
		tok = strings.TrimSpace(os.Getenv(dashboardTokenEnv))
		if tok == "" {
			return "", "", nil
		}
	} else {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", "", fmt.Errorf("%w: --dashboard-token-file: %v", wire.ErrUsage, err)
		}
		tok, from = strings.TrimSpace(string(b)), "--dashboard-token-file "+file
		if tok == "" {
			return "", "", fmt.Errorf("%w: --dashboard-token-file %s is empty: put a secret token in it (e.g. openssl rand -hex 32 > %s)", wire.ErrUsage, file, file)
		}
		warning = exposed(file, "--dashboard-token-file", true)
	}
	switch {
	case strings.ContainsAny(tok, " \t\r\n"):
		return "", "", fmt.Errorf("%w: %s holds more than one word: the token is one word, without spaces or line breaks", wire.ErrUsage, from)
	case len(tok) < 16:
		return "", "", fmt.Errorf("%w: the token in %s has %d characters: use at least 16 (e.g. openssl rand -hex 32)", wire.ErrUsage, from, len(tok))
	}
	return tok, warning, nil
}

// serveDashboard serves d on addr until the returned stop is called.
func serveDashboard(addr string, h http.Handler, log *slog.Logger) (stop func(), bound string, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("--dashboard-addr %s: %v (is another process using the port?)", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("outbox: dashboard server stopped", "error", err.Error())
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, ln.Addr().String(), nil
}

// newDashboard builds the dashboard of a relay (r may be nil) with the
// CLI's wording for enabling actions.
func newDashboard(st store.Store, r *relay.Relay, token string, hosts []string, hint string, log *slog.Logger) (*dashboard.Dashboard, error) {
	d, err := dashboard.New(dashboard.Config{Store: st, Relay: r, Token: token, Hosts: hosts, ReadOnlyHint: hint, Logger: log})
	if err != nil {
		return nil, errors.New(strings.ReplaceAll(strings.TrimPrefix(err.Error(), "dashboard: "), "Hosts", "--dashboard-host"))
	}
	return d, nil
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
