package relay_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store/sqlitestore"
)

// A relay delivers what was committed, then stops gracefully when its
// context ends.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	st, _ := sqlitestore.Open(ctx, "sqlite:"+filepath.Join(dir, "app.db"), sqlitestore.Config{})
	defer st.Close()
	_ = st.Migrate(ctx)
	_ = st.Enqueue(ctx,
		outbox.Message{Topic: "orders.paid", Key: "order-1", Type: "OrderPaid", Payload: []byte("first")},
		outbox.Message{Topic: "orders.paid", Key: "order-1", Type: "OrderShipped", Payload: []byte("second")},
	)

	br, _ := membroker.New(membroker.Config{}) // natsbroker.Dial(…) in production
	r, _ := relay.New(st, br, relay.Config{})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(runCtx) }()

	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, _ := br.Wait(waitCtx, "orders.paid", 2)
	stop()
	<-done
	for _, e := range got {
		fmt.Println(e.Key, string(e.Payload))
	}
	// Output:
	// order-1 first
	// order-1 second
}

// deliveredCounter is a hook: it implements relay.HookSettle.
type deliveredCounter struct{ n atomic.Int64 }

func (c *deliveredCounter) OnSettle(_ context.Context, r relay.BatchReport) {
	c.n.Add(int64(r.Delivered))
}

// Hooks attach metrics, tracing or a dashboard to a relay: each hook
// implements the Hook… interfaces it cares about.
func ExampleConfig_hooks() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	st, _ := sqlitestore.Open(ctx, "sqlite:"+filepath.Join(dir, "app.db"), sqlitestore.Config{})
	defer st.Close()
	_ = st.Migrate(ctx)
	_ = st.Enqueue(ctx, outbox.Message{Topic: "orders.paid", Key: "order-1", Type: "OrderPaid", Payload: []byte("{}")})

	counter := &deliveredCounter{}
	br, _ := membroker.New(membroker.Config{})
	r, _ := relay.New(st, br, relay.Config{Hooks: []relay.Hook{counter}})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(runCtx) }()
	for counter.n.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	stop()
	<-done
	h := r.Health()
	fmt.Println("delivered:", counter.n.Load(), "healthy:", h.StoreError == "" && h.BrokerError == "")
	// Output:
	// delivered: 1 healthy: true
}

// shardWatcher is a hook: it implements relay.HookShards.
type shardWatcher struct{ gained atomic.Int64 }

func (w *shardWatcher) OnShards(_ context.Context, s relay.ShardInfo) {
	w.gained.Add(int64(len(s.Gained)))
}

// A relay heartbeats its shard leases (SQLite has one shard); HookShards
// and Health show what it holds, for a gauge such as outbox_shards_held.
func ExampleHookShards() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	st, _ := sqlitestore.Open(ctx, "sqlite:"+filepath.Join(dir, "app.db"), sqlitestore.Config{})
	defer st.Close()
	_ = st.Migrate(ctx)

	w := &shardWatcher{}
	br, _ := membroker.New(membroker.Config{})
	r, _ := relay.New(st, br, relay.Config{Hooks: []relay.Hook{w}})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(runCtx) }()
	for w.gained.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	h := r.Health()
	fmt.Printf("owned: %v, holding %d of %d shards, %d relay(s) live\n", h.Owned, h.ShardsHeld, h.Shards, h.RelaysSeen)
	stop()
	<-done
	fmt.Println("after stop:", r.Health().ShardsHeld)
	// Output:
	// owned: true, holding 1 of 1 shards, 1 relay(s) live
	// after stop: 0
}
