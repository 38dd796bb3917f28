package relay_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
		outbox.Message{Topic: "orders.paid", Key: "order-1", Payload: []byte("first")},
		outbox.Message{Topic: "orders.paid", Key: "order-1", Payload: []byte("second")},
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
