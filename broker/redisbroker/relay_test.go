package redisbroker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/redisbroker"
	"github.com/outbox-go/outbox/inbox/redismsg"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// Events enqueued in SQLite are delivered by the relay to Redis, and read
// back with go-redis (XRANGE) and inbox/redismsg: every event once (dedup
// keeps re-publishes out), payload, headers and CloudEvents attributes
// unchanged, each key's events in enqueue order.
func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	url := testenv.Require(t, testenv.Redis)
	c := admin(t, url)
	stream := uniqueName("rb_relay")
	cleanup(t, c, stream)
	b := dial(t, url, redisbroker.Config{Source: "/e2e"})
	st := teststores.Open(t, "sqlite", store.Options{Check: b.Check}).Store

	const n, keys = 2000, 50
	msgs := make([]outbox.Message, n)
	seq := map[string]int{}
	for i := range msgs {
		key := fmt.Sprintf("agg-%d", i%keys)
		if i%11 == 0 {
			key = ""
		}
		seq[key]++
		msgs[i] = outbox.Message{Topic: stream, Key: key, Type: "Bumped", AggregateType: "Agg", SchemaVersion: 1 + i%3,
			Payload: fmt.Appendf(nil, "%s#%d", key, seq[key]), Headers: map[string]string{"traceparent": fmt.Sprintf("00-%032x-%016x-01", i, i)}}
	}
	for i := 0; i < n; i += 250 {
		if err := st.Enqueue(context.Background(), msgs[i:i+250]...); err != nil {
			t.Fatal(err)
		}
	}
	r, err := relay.New(st, b, relay.Config{BatchSize: 200, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, err := st.Stats(context.Background())
		if err == nil && s.Pending() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained: %+v %v", s, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	entries, err := c.XRange(ctxFor(t, 10*time.Second), stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != n {
		t.Errorf("the stream holds %d entries for %d events", len(entries), n)
	}
	byPayload := map[string]outbox.Message{}
	for _, m := range msgs {
		byPayload[string(m.Payload)] = m
	}
	next := map[string]int{}
	ids := map[string]bool{}
	for _, en := range entries {
		m, err := redismsg.FromXMessage(stream, en)
		if err != nil {
			t.Fatalf("entry %s: %v", en.ID, err)
		}
		want, ok := byPayload[string(m.Payload)]
		if !ok {
			t.Fatalf("entry %s: unexpected payload %q", en.ID, m.Payload)
		}
		if ids[m.EventID] {
			t.Errorf("event %s stored twice", m.EventID)
		}
		ids[m.EventID] = true
		if m.Key != want.Key || m.Type != "Bumped" || m.AggregateType != "Agg" || m.SchemaVersion != want.SchemaVersion ||
			m.Source != "/e2e" || m.ContentType != outbox.DefaultContentType || m.Time.IsZero() ||
			m.Headers["traceparent"] != want.Headers["traceparent"] || len(m.Headers) != 1 {
			t.Errorf("entry %s = %+v, want %+v", en.ID, m, want)
		}
		if want.Key != "" {
			_, s, _ := strings.Cut(string(m.Payload), "#")
			var k int
			fmt.Sscan(s, &k)
			if k != next[want.Key]+1 {
				t.Errorf("key %s: #%d after #%d", want.Key, k, next[want.Key])
			}
			next[want.Key] = k
		}
	}
}
