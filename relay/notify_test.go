package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/internal/teststores"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/pgstore"
)

// A writer in "another process" (a store of its own, no in-process signal)
// coalesces its notifications: with NotifyInterval an hour, only the first
// enqueue of a burst notifies. The relay polls only every 10 s here, so the
// rest of the burst must be found by its re-checks after a round with
// events, within milliseconds.
func TestCoalescedWakeUpsStillDeliverPromptly(t *testing.T) {
	url := teststores.URL(t, "postgres")
	opts := store.Options{Table: teststores.UniqueTable("rn_")}
	ctx := context.Background()
	relayStore, err := pgstore.Open(ctx, url, pgstore.Config{Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	writer, err := pgstore.Open(ctx, url, pgstore.Config{Options: opts, NotifyInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { writer.Close(); relayStore.Close(); teststores.Drop(t, "postgres", url, opts.Table) })
	if err := relayStore.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	mb := newMem(t, membroker.Config{})
	cfg := fastConfig()
	cfg.PollInterval = 10 * time.Second
	run(t, relayStore, mb, cfg)
	time.Sleep(300 * time.Millisecond) // let the relay LISTEN and go idle

	const burst = 5
	start := time.Now()
	for i := range burst {
		if err := writer.Enqueue(ctx, outbox.Message{Topic: "t", Key: fmt.Sprintf("k%d", i), Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Millisecond)
	}
	waitFor(t, "the whole burst, long before the 10 s poll", 2*time.Second, func() bool { return len(mb.Events("t")) == burst })
	t.Logf("a burst of %d with one notification delivered in %v", burst, time.Since(start).Round(time.Millisecond))
}
