package natsbroker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/internal/testnats"
)

// Close with a short ctx while a call waits for PubAcks that cannot come
// (a plain subscriber on the subject, no stream: nothing answers) drops the
// reply subscription and tells the call at once: every unconfirmed event
// fails with ErrClosed, transient, so the relay retries it; not at the
// call's deadline, and not as a lost connection that "reconnects by
// itself". An event whose PubAck came stays confirmed. The connection is
// the caller's (New: it stays up, so only Close can end the wait) or
// Dial's (Close closes it under the waiting call); with MaxPending 1 the
// last event is still waiting for room to be sent.
func TestCloseTellsTheCallsStillWaiting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		dial       bool
		maxPending int
	}{
		{"New", false, 0},
		{"Dial", true, 0},
		{"New waiting for room", false, 1},
		{"Dial waiting for room", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := testnats.Start(t)
			admin := connect(t, srv.URL())
			js, _ := jetstream.New(admin)
			stored := uniqueName("stored")
			createStream(t, js, stored, jetstream.MemoryStorage)
			silent := uniqueName("silent")
			sub, err := admin.SubscribeSync(silent)
			if err != nil {
				t.Fatal(err)
			}
			if err := admin.Flush(); err != nil {
				t.Fatal(err)
			}

			// A Timeout far beyond the test's bounds: only Close can end
			// the wait in time.
			cfg := natsbroker.Config{Timeout: 30 * time.Second, MaxPending: tc.maxPending}
			var b *natsbroker.Broker
			if tc.dial {
				b = dial(t, srv.URL(), cfg)
			} else {
				nc := connect(t, srv.URL())
				if b, err = natsbroker.New(nc, cfg); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					_ = b.Close(context.Background())
					if !nc.IsConnected() {
						t.Error("Close closed a connection the caller owns")
					}
				})
			}

			events := []outbox.Event{event(stored, 0), event(silent, 1), event(silent, 2)}
			type outcome struct {
				res []error
				at  time.Time
			}
			got := make(chan outcome, 1)
			go func() {
				res := b.Publish(context.Background(), events)
				got <- outcome{res, time.Now()}
			}()
			// The first silent event reached its subscriber: the call was
			// sent up to it (after the stored event) and waits for its
			// PubAck, or, with MaxPending 1, for room to send the last.
			if _, err := sub.NextMsg(10 * time.Second); err != nil {
				t.Fatalf("the silent event never arrived: %v", err)
			}

			const short = 200 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), short)
			defer cancel()
			err = b.Close(ctx)
			closed := time.Now()
			deadline, _ := ctx.Deadline()
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "PubAck") {
				t.Errorf("Close = %v; want the error saying publishes were still waiting", err)
			}
			// Within ~100 ms of ctx's end; the bound leaves room for a
			// loaded machine under -race.
			const slack = 250 * time.Millisecond
			if late := closed.Sub(deadline); late > slack {
				t.Errorf("Close returned %v after its ctx ended", late)
			}
			var o outcome
			select {
			case o = <-got:
			case <-time.After(5 * time.Second):
				t.Fatal("the waiting call did not return within 5s of Close")
			}
			if late := o.at.Sub(deadline); late > slack {
				t.Errorf("the waiting call returned %v after Close's ctx ended", late)
			}
			t.Logf("after Close's ctx ended: Close returned in %v, the waiting call in %v", closed.Sub(deadline), o.at.Sub(deadline))
			if o.res[0] != nil {
				t.Errorf("event 0, PubAck received before Close: %v; want success", o.res[0])
			}
			for i, err := range o.res[1:] {
				switch {
				case err == nil || broker.IsPermanent(err) || !errors.Is(err, natsbroker.ErrClosed) || !errors.Is(err, broker.ErrUnavailable):
					t.Errorf("event %d: %v; want a transient ErrClosed", i+1, err)
				case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, natsbroker.ErrNotConnected) || strings.Contains(err.Error(), "reconnect"):
					t.Errorf("event %d: %v; want the broker closed, not a deadline or a lost connection", i+1, err)
				}
			}
			if res := b.Publish(ctxFor(t, 5*time.Second), []outbox.Event{event(stored, 3)}); !errors.Is(res[0], natsbroker.ErrClosed) {
				t.Errorf("Publish after Close: %v; want ErrClosed", res[0])
			}
		})
	}
}
