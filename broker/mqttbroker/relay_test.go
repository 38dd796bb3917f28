package mqttbroker_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/outbox-go/outbox/broker/mqttbroker"
	"github.com/outbox-go/outbox/inbox/mqttmsg"
	"github.com/outbox-go/outbox/internal/faultproxy"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/e2echeck"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// TestRelayEndToEnd: events committed in PostgreSQL reach Mosquitto
// through relay.Run, and a QoS 1 subscriber using paho and inbox/mqttmsg
// reads every one with its payload, headers and CloudEvents attributes,
// each key's events first delivered in commit order, although the
// relay's connection is reset in the middle of the stream.
func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	_, addr := server(t)
	proxy, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	st := teststores.Open(t, "postgres", store.Options{}).Store
	topic := uniqueName("outbox/relay_e2e")
	s := subscribe(t, addr, topic)

	const n, keys = 3000, 30
	msgs := e2echeck.Workload(t, st, topic, n, keys)
	ctx := context.Background()

	b := dial(t, "mqtt://"+proxy.Addr(), mqttbroker.Config{Source: e2echeck.Source})
	rl, err := relay.New(st, b, relay.Config{
		BatchSize: 200, PollInterval: 20 * time.Millisecond, BackoffBase: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rl.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	start := time.Now()
	rb := e2echeck.NewReadback(t, msgs)
	reset := false
	deadline := ctxFor(t, 90*time.Second)
	for rb.Seen() < n {
		p, err := s.next(deadline)
		if err != nil {
			t.Fatalf("%d of %d events arrived, then: %v", rb.Seen(), n, err)
		}
		m, err := mqttmsg.FromPublish(p)
		if err != nil {
			t.Fatalf("FromPublish: %v", err)
		}
		rb.Add(m)
		if rb.Seen() == 500 && !reset {
			if k := proxy.ResetAll(); k != 1 {
				t.Fatalf("reset %d connections, want the relay's 1", k)
			}
			reset = true
			t.Logf("reset after %v", time.Since(start))
		}
	}
	t.Logf("%d events, %d duplicates after the connection was reset; %v", n, rb.Dups, time.Since(start))
	e2echeck.Drained(deadline, t, st)
}
