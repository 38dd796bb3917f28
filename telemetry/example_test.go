package telemetry_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store/sqlitestore"
	"github.com/outbox-go/outbox/telemetry"
)

// Metrics and health endpoints for a relay: the metrics are a hook of the
// relay, the state reads its health and the store's backlog at scrape time.
func ExampleHandler() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	st, _ := sqlitestore.Open(ctx, "sqlite:"+filepath.Join(dir, "app.db"), sqlitestore.Config{})
	defer st.Close()
	_ = st.Migrate(ctx)
	br, _ := membroker.New(membroker.Config{}) // natsbroker.Dial(…) in production

	metrics := telemetry.NewMetrics()
	r, _ := relay.New(st, br, relay.Config{Hooks: []relay.Hook{metrics}})
	state := telemetry.NewState(r, st)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics, state)
	h, _ := telemetry.Handler(telemetry.HandlerConfig{Gatherer: reg, State: state})
	srv := httptest.NewServer(h) // http.ListenAndServe("127.0.0.1:9464", h) in production
	defer srv.Close()

	resp, _ := srv.Client().Get(srv.URL + "/readyz")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Print(resp.StatusCode, " ", string(body))
	// Output: 200 ready
}
