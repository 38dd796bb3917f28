package amqpbroker_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/outbox-go/outbox/broker/amqpbroker"
	"github.com/outbox-go/outbox/inbox/amqpmsg"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/e2echeck"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// TestRelayEndToEnd: events committed in PostgreSQL reach RabbitMQ through
// relay.Run, and a consumer using amqp091-go and inbox/amqpmsg reads every
// one with its payload, headers and CloudEvents attributes, each key's
// events first delivered in commit order, although rabbitmqctl closes the
// adapter's connection in the middle of the stream.
func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	url, conn := admin(t)
	st := teststores.Open(t, "postgres", store.Options{}).Store
	q := uniqueName("relay_e2e")
	r := declareQueue(t, conn, "", q, q)

	const n, keys = 3000, 30
	msgs := e2echeck.Workload(t, st, q, n, keys)
	ctx := context.Background()

	name := uniqueName("outbox-relay-e2e")
	b := dial(t, url, amqpbroker.Config{ConnectionName: name, Source: e2echeck.Source})
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

	rb := e2echeck.NewReadback(t, msgs)
	killed := false
	deadline := ctxFor(t, 90*time.Second)
	for rb.Seen() < n {
		d, err := r.next(deadline)
		if err != nil {
			t.Fatalf("%d of %d events arrived, then: %v", rb.Seen(), n, err)
		}
		m, err := amqpmsg.FromDelivery(d)
		if err != nil {
			t.Fatalf("FromDelivery: %v", err)
		}
		rb.Add(m)
		if rb.Seen() == 500 && !killed {
			closeConnection(t, name)
			killed = true
		}
	}
	t.Logf("%d events, %d duplicates after the connection was closed", n, rb.Dups)
	e2echeck.Drained(deadline, t, st)
}
