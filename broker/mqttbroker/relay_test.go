package mqttbroker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/mqttbroker"
	"github.com/outbox-go/outbox/inbox/mqttmsg"
	"github.com/outbox-go/outbox/internal/teststores"
	"github.com/outbox-go/outbox/internal/torture"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
)

// TestRelayEndToEnd: events committed in PostgreSQL reach Mosquitto
// through relay.Run, and a QoS 1 subscriber using paho and inbox/mqttmsg
// reads every one with its payload, headers and CloudEvents attributes,
// each key's events first delivered in commit order, although the
// relay's connection is reset in the middle of the stream.
func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	_, addr := server(t)
	proxy, err := torture.NewProxy(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	st := teststores.Open(t, "postgres", store.Options{}).Store
	topic := uniqueName("outbox/relay_e2e")
	s := subscribe(t, addr, topic)

	const n, keys = 3000, 30
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		key := fmt.Sprintf("order-%d", i%keys)
		if i%11 == 0 {
			key = ""
		}
		msgs[i] = outbox.Message{
			Topic: topic, Key: key, Type: "OrderBumped", AggregateType: "Order", SchemaVersion: 2,
			Payload: fmt.Appendf(nil, `{"i":%d}`, i), Headers: map[string]string{"tenant": "acme", "seq": strconv.Itoa(i)},
		}
	}
	ctx := context.Background()
	for i := 0; i < n; i += 500 {
		if err := st.Enqueue(ctx, msgs[i:i+500]...); err != nil {
			t.Fatal(err)
		}
	}

	b := dial(t, "mqtt://"+proxy.Addr(), mqttbroker.Config{Source: "/orders"})
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
	seen := map[string]bool{}
	lastSeq := map[string]int{}
	dups, reset := 0, false
	deadline := ctxFor(t, 90*time.Second)
	for len(seen) < n {
		p, err := s.next(deadline)
		if err != nil {
			t.Fatalf("%d of %d events arrived, then: %v", len(seen), n, err)
		}
		m, err := mqttmsg.FromPublish(p)
		if err != nil {
			t.Fatalf("FromPublish: %v", err)
		}
		if seen[m.EventID] {
			dups++
			continue
		}
		seen[m.EventID] = true
		i, err := strconv.Atoi(m.Headers["seq"])
		if err != nil || i < 0 || i >= n {
			t.Fatalf("message with seq %q", m.Headers["seq"])
		}
		want := msgs[i]
		if m.Key != want.Key || m.Type != want.Type || m.AggregateType != "Order" || m.SchemaVersion != 2 || m.Source != "/orders" ||
			string(m.Payload) != string(want.Payload) || m.Headers["tenant"] != "acme" || m.ContentType != outbox.DefaultContentType || m.Topic != topic {
			t.Fatalf("event %d arrived as %+v", i, m)
		}
		if want.Key != "" {
			if prev, ok := lastSeq[want.Key]; ok && prev > i {
				t.Fatalf("key %s: event %d first delivered after event %d", want.Key, i, prev)
			}
			lastSeq[want.Key] = i
		}
		if len(seen) == 500 && !reset {
			if k := proxy.ResetAll(); k != 1 {
				t.Fatalf("reset %d connections, want the relay's 1", k)
			}
			reset = true
			t.Logf("reset after %v", time.Since(start))
		}
	}
	t.Logf("%d events, %d duplicates after the connection was reset; %v", n, dups, time.Since(start))
	stats, err := st.Stats(ctx)
	for err == nil && stats.Pending() > 0 && deadline.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		stats, err = st.Stats(ctx)
	}
	if err != nil || stats.Pending() != 0 || stats.Dead != 0 {
		t.Errorf("store after the drain: %+v, %v", stats, err)
	}
}
