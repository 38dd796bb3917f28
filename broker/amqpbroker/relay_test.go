package amqpbroker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/amqpbroker"
	"github.com/outbox-go/outbox/inbox/amqpmsg"
	"github.com/outbox-go/outbox/internal/teststores"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
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
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		key := fmt.Sprintf("order-%d", i%keys)
		if i%11 == 0 {
			key = ""
		}
		msgs[i] = outbox.Message{
			Topic: q, Key: key, Type: "OrderBumped", AggregateType: "Order", SchemaVersion: 2,
			Payload: fmt.Appendf(nil, `{"i":%d}`, i), Headers: map[string]string{"tenant": "acme", "seq": strconv.Itoa(i)},
		}
	}
	ctx := context.Background()
	for i := 0; i < n; i += 500 {
		if err := st.Enqueue(ctx, msgs[i:i+500]...); err != nil {
			t.Fatal(err)
		}
	}

	name := uniqueName("outbox-relay-e2e")
	b := dial(t, url, amqpbroker.Config{ConnectionName: name, Source: "/orders"})
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

	seen := map[string]bool{}
	lastSeq := map[string]int{} // key → seq of its last first delivery
	dups, killed := 0, false
	deadline := ctxFor(t, 90*time.Second)
	for len(seen) < n {
		d, err := r.next(deadline)
		if err != nil {
			t.Fatalf("%d of %d events arrived, then: %v", len(seen), n, err)
		}
		m, err := amqpmsg.FromDelivery(d)
		if err != nil {
			t.Fatalf("FromDelivery: %v", err)
		}
		if seen[m.EventID] {
			dups++
			continue
		}
		seen[m.EventID] = true
		i, err := strconv.Atoi(m.Headers["seq"])
		if err != nil || i < 0 || i >= n {
			t.Fatalf("delivery with seq header %q", m.Headers["seq"])
		}
		want := msgs[i]
		if m.Key != want.Key || m.Type != want.Type || m.AggregateType != "Order" || m.SchemaVersion != 2 || m.Source != "/orders" ||
			string(m.Payload) != string(want.Payload) || m.Headers["tenant"] != "acme" || m.ContentType != outbox.DefaultContentType || m.Topic != q {
			t.Fatalf("event %d arrived as %+v", i, m)
		}
		if want.Key != "" {
			if prev, ok := lastSeq[want.Key]; ok && prev > i {
				t.Fatalf("key %s: event %d first delivered after event %d", want.Key, i, prev)
			}
			lastSeq[want.Key] = i
		}
		if len(seen) == 500 && !killed {
			closeConnection(t, name)
			killed = true
		}
	}
	t.Logf("%d events, %d duplicates after the connection was closed", n, dups)
	stats, err := st.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for stats.Pending() > 0 && deadline.Err() == nil { // the last acks may still be on their way
		time.Sleep(50 * time.Millisecond)
		if stats, err = st.Stats(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if stats.Pending() != 0 || stats.Dead != 0 {
		t.Errorf("store after the drain: %+v", stats)
	}
}
