package redismsg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/redisbroker"
	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/inbox/redismsg"
	"github.com/outbox-go/outbox/internal/testenv"
)

// What redisbroker adds, read back with go-redis's XRANGE, comes out as
// the event that was published.
func TestRoundTripThroughRedis(t *testing.T) {
	t.Parallel()
	url := testenv.Require(t, testenv.Redis)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := redisbroker.Dial(url, redisbroker.Config{Source: "/billing"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	opt, _ := redis.ParseURL(url)
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	stream := "redismsg_" + outbox.NewEventID()
	defer rdb.Del(context.Background(), stream)

	created := time.Date(2026, 3, 4, 5, 6, 7, 8000, time.UTC)
	e := outbox.Event{ID: 7, CreatedAt: created, Message: outbox.Message{
		EventID: outbox.NewEventID(), Topic: stream, Key: "订单 42", Type: "Order Paid",
		AggregateType: "Order", SchemaVersion: 2, ContentType: "application/json",
		Payload: []byte{'{', 0, 0xff, '}'}, Headers: map[string]string{"tenant": "acme", "ce_type": "a header, not the type"},
	}}
	if err := b.Publish(ctx, []outbox.Event{e})[0]; err != nil {
		t.Fatal(err)
	}
	defer rdb.Del(context.Background(), redisbroker.DefaultDedupPrefix+"{"+stream+"}:"+e.EventID)
	msgs, err := rdb.XRange(ctx, stream, "-", "+").Result()
	if err != nil || len(msgs) != 1 {
		t.Fatal(msgs, err)
	}
	got, err := redismsg.FromXMessage(stream, msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	if got.EventID != e.EventID || got.Type != e.Type || got.Key != e.Key || got.SchemaVersion != 2 ||
		got.AggregateType != "Order" || got.Source != "/billing" || got.ContentType != "application/json" ||
		got.Topic != stream || string(got.Payload) != string(e.Payload) || !got.Time.Equal(created) {
		t.Errorf("FromXMessage = %+v", got)
	}
	if len(got.Headers) != 2 || got.Headers["tenant"] != "acme" || got.Headers["ce_type"] != "a header, not the type" {
		t.Errorf("Headers = %v", got.Headers)
	}
	if len(got.Extensions) != 0 {
		t.Errorf("Extensions = %v", got.Extensions)
	}
}

func TestMalformedEntries(t *testing.T) {
	t.Parallel()
	good := func() map[string]any {
		return map[string]any{"data": "x", "ce_id": "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a", "ce_type": "T"}
	}
	if m, err := redismsg.FromValues("s", good()); err != nil || m.SchemaVersion != 1 {
		t.Fatalf("a minimal entry: %+v, %v", m, err)
	}
	for _, c := range []struct {
		name string
		edit func(map[string]any)
		want error
	}{
		{"no id", func(v map[string]any) { delete(v, "ce_id") }, inbox.ErrMissingEventID},
		{"id not a UUID", func(v map[string]any) { v["ce_id"] = "42" }, inbox.ErrMalformedHeader},
		{"bad schema version", func(v map[string]any) { v["ce_schemaversion"] = "two" }, inbox.ErrMalformedHeader},
		{"bad time", func(v map[string]any) { v["ce_time"] = "yesterday" }, inbox.ErrMalformedHeader},
		{"not a string", func(v map[string]any) { v["ce_type"] = 7 }, inbox.ErrMalformedHeader},
	} {
		v := good()
		c.edit(v)
		if _, err := redismsg.FromValues("s", v); !errors.Is(err, c.want) {
			t.Errorf("%s: %v; want %v", c.name, err, c.want)
		}
	}
	if _, err := redismsg.FromValues("s", nil); err == nil {
		t.Error("nil fields accepted")
	}
}
