package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/dashboard"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// BenchmarkDrainWithDashboard: the relay's drain rate over PostgreSQL with
// its dashboard off and on, alternated in the same run (off, on, off, on,
// …) so that a loaded machine weighs on both alike. "On" is the dashboard
// sampling at its default rate plus a client reading the overview and the
// dead letters every 500 ms, four times what one open page does.
//
//	go test -run XXX -bench DrainWithDashboard -benchtime 1x ./dashboard/
func BenchmarkDrainWithDashboard(b *testing.B) {
	const events, rounds = 50_000, 4
	o := teststores.Open(b, "postgres", store.Options{})
	mb, err := membroker.New(membroker.Config{})
	if err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	msgs := make([]outbox.Message, events)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "orders.paid", Key: fmt.Sprintf("order-%d", i%1000), Type: "OrderPaid", Payload: []byte(`{"order_id":42,"status":"PAID"}`)}
	}
	drainOnce := func(withDashboard bool) float64 {
		ctx := context.Background()
		for i := 0; i < len(msgs); i += 5000 {
			if err := o.Store.Enqueue(ctx, msgs[i:i+5000]...); err != nil {
				b.Fatal(err)
			}
		}
		mb.Reset()
		r, err := relay.New(o.Store, mb, relay.Config{Logger: quiet, PollInterval: 5 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		stopClient := make(chan struct{})
		clientDone := make(chan struct{})
		if withDashboard {
			d, err := dashboard.New(dashboard.Config{Store: o.Store, Relay: r, Token: "bench-token-0123456789", Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(d)
			defer func() { srv.Close(); d.Close() }()
			go func() {
				defer close(clientDone)
				t := time.NewTicker(500 * time.Millisecond)
				defer t.Stop()
				for {
					for _, p := range []string{"/api/overview", "/api/dead?limit=25"} {
						if resp, err := http.Get(srv.URL + p); err == nil {
							_, _ = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
					}
					select {
					case <-stopClient:
						return
					case <-t.C:
					}
				}
			}()
		} else {
			close(clientDone)
		}
		start := time.Now()
		go func() { defer close(done); _ = r.Run(rctx) }()
		for mb.Stats().Confirmed < events {
			time.Sleep(2 * time.Millisecond)
		}
		took := time.Since(start)
		cancel()
		<-done
		close(stopClient)
		<-clientDone
		return events / took.Seconds()
	}
	for i := 0; i < b.N; i++ {
		var off, on float64
		// ABBA order: neither setting always runs on the table the other
		// just emptied.
		for r := range rounds {
			var a, c float64
			if r%2 == 0 {
				a = drainOnce(false)
				c = drainOnce(true)
			} else {
				c = drainOnce(true)
				a = drainOnce(false)
			}
			b.Logf("round %d: off %.0f ev/s, on %.0f ev/s", r+1, a, c)
			off, on = off+a, on+c
		}
		off, on = off/rounds, on/rounds
		b.ReportMetric(off, "ev/s-off")
		b.ReportMetric(on, "ev/s-on")
		b.ReportMetric(100*(off-on)/off, "%overhead")
	}
}
