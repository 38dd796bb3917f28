package redisbroker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/redisbroker"
	"github.com/outbox-go/outbox/internal/testenv"
)

// On a cluster client the streams of one call sit in different hash
// slots; the dedup script runs once per stream, and go-redis sends each to
// its slot's node, so all are published. The client routes every slot to
// the one local server.
func TestClusterClientCallAcrossSlots(t *testing.T) {
	t.Parallel()
	url := testenv.Require(t, testenv.Redis)
	c := admin(t, url)
	addr := c.Options().Addr
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: addr}}}}, nil
		},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := redisbroker.New(rdb, redisbroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var events []outbox.Event
	for i := range 3 {
		stream := uniqueName(fmt.Sprintf("rb_slot%d", i))
		cleanup(t, c, stream)
		events = append(events, event(stream, i))
	}
	res := b.PublishResults(ctxFor(t, 10*time.Second), events)
	for i, r := range res {
		if r.Err != nil || r.Duplicate || r.ID == "" {
			t.Errorf("event %d on %s: %+v; want it added", i, events[i].Topic, r)
		}
	}
	again := b.PublishResults(ctxFor(t, 10*time.Second), events)
	for i, r := range again {
		if r.Err != nil || !r.Duplicate || r.ID != res[i].ID {
			t.Errorf("republished event %d: %+v; want a duplicate of %s", i, r, res[i].ID)
		}
		if n, _ := c.XLen(ctxFor(t, 5*time.Second), events[i].Topic).Result(); n != 1 {
			t.Errorf("%s holds %d entries, want 1", events[i].Topic, n)
		}
	}
}
