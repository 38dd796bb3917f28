package relay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// On a key-ordered broker the whole batch goes in one Publish call, and the
// broker fails the later events of a key after its first failure without
// trying them. Those events were never attempted: they must come back
// with no attempt counted, so they cannot go DEAD untried behind a flaky
// predecessor.
func TestHeldBackEventsOfAKeyOrderedBrokerCountNoAttempt(t *testing.T) {
	forEachStore(t, func(t *testing.T, st driver.Store, cfg relay.Config) {
		ctx := context.Background()
		mb := newMem(t, membroker.Config{KeyOrdered: true})
		mb.SetHook(func(e outbox.Event) error {
			if string(e.Payload) == "k#1" {
				return errors.New("timeout")
			}
			return nil
		})
		var msgs []outbox.Message
		for i := 1; i <= 5; i++ {
			msgs = append(msgs, outbox.Message{Topic: "t", Key: "k", Type: "Bumped", Payload: fmt.Appendf(nil, "k#%d", i)})
		}
		msgs = append(msgs, outbox.Message{Topic: "t", Key: "other", Type: "Bumped", Payload: []byte("other#1")})
		if err := st.Enqueue(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
		cfg.MaxAttempts = 3
		run(t, st, mb, cfg)
		waitFor(t, "k#1 to go dead", 30*time.Second, func() bool { return pending(t, st).Dead >= 1 })
		waitFor(t, "the batch to settle", 10*time.Second, func() bool { return pending(t, st).Sending == 0 })
		time.Sleep(200 * time.Millisecond) // a wrongly counted attempt would show by now
		dead, err := st.ListDead(ctx, store.DeadQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) != 1 || string(dead[0].Payload) != "k#1" || dead[0].Attempts != 3 {
			for _, d := range dead {
				t.Errorf("dead: %s attempts=%d %q", d.Payload, d.Attempts, d.LastError)
			}
			t.Fatalf("want only k#1 dead after 3 attempts")
		}
		for _, e := range mb.Events("t") {
			if e.Key == "k" {
				t.Fatalf("%s delivered while k#1 failed: order broken", e.Payload)
			}
		}
		if got := len(mb.Events("t")); got != 1 {
			t.Errorf("delivered %d events, want other#1 only", got)
		}
		s := pending(t, st)
		if s.New != 4 || s.Retrying != 0 {
			t.Errorf("stats = %+v: want k#2..k#5 waiting with no attempt counted", s)
		}
	})
}
