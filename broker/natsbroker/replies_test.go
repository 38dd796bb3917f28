package natsbroker_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/internal/testnats"
)

// Many concurrent Publish calls on one connection share one reply
// subscription, and each gets exactly its own PubAcks: a call whose topic
// has no stream fails alone, with ErrNoStream, and the others succeed.
// Close drops the subscription.
func TestConcurrentCallsShareOneReplySubscription(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	admin := connect(t, srv.URL())
	js, _ := jetstream.New(admin)
	subject := uniqueName("shared")
	stream := createStream(t, js, subject, jetstream.MemoryStorage)
	nc := connect(t, srv.URL())
	b, err := natsbroker.New(nc, natsbroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if n := nc.NumSubscriptions(); n != 0 {
		t.Fatalf("%d subscriptions before the first Publish; want 0", n)
	}

	const calls, rounds, perCall = 16, 5, 7
	var wg sync.WaitGroup
	for c := range calls {
		wg.Go(func() {
			for r := range rounds {
				events := make([]outbox.Event, perCall)
				for i := range events {
					events[i] = event(subject, (c*rounds+r)*perCall+i)
				}
				for i, err := range b.Publish(ctxFor(t, 20*time.Second), events) {
					if err != nil {
						t.Errorf("call %d round %d event %d: %v", c, r, i, err)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := nc.NumSubscriptions(); n != 1 {
		t.Errorf("%d subscriptions after %d Publish calls; want the one reply subscription", n, calls*rounds)
	}
	if info, _ := stream.Info(ctxFor(t, 5*time.Second)); info == nil || info.State.Msgs != calls*rounds*perCall {
		t.Errorf("stream state = %+v, want %d messages", info, calls*rounds*perCall)
	}

	// Calls with a topic no stream captures, among calls without: the "no
	// responders" of the first must not reach the others.
	missing := uniqueName("nostream")
	for c := range calls {
		wg.Go(func() {
			topic := subject
			if c%2 == 1 {
				topic = missing
			}
			events := []outbox.Event{event(topic, c), event(topic, c+calls)}
			for i, err := range b.Publish(ctxFor(t, 20*time.Second), events) {
				if c%2 == 0 && err != nil {
					t.Errorf("call %d (stream) event %d: %v", c, i, err)
				}
				if c%2 == 1 && (!broker.IsPermanent(err) || !errors.Is(err, natsbroker.ErrNoStream)) {
					t.Errorf("call %d (no stream) event %d: %v; want a permanent ErrNoStream", c, i, err)
				}
			}
		})
	}
	wg.Wait()

	before := nc.NumSubscriptions() // the reply subscription, and jetstream's own for the lookups
	if err := b.Close(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := nc.NumSubscriptions(); n != before-1 {
		t.Errorf("%d subscriptions after Close, %d before; want the reply subscription gone", n, before)
	}
	if !nc.IsConnected() {
		t.Error("Close closed a connection the caller owns")
	}
}

// A call in flight when the connection is lost and comes back fails as not
// connected (its PubAck never comes); calls after the reconnect use the
// renewed reply subscription and succeed.
func TestCallsWorkAfterAReconnect(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	admin := connect(t, srv.URL())
	js, _ := jetstream.New(admin)
	subject := uniqueName("reconnect")
	createStream(t, js, subject, jetstream.FileStorage)
	silent := silentSubject(t, srv.URL(), "silent")
	b := dial(t, srv.URL(), natsbroker.Config{})
	if res := b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{event(subject, 0)}); res[0] != nil {
		t.Fatalf("before the restart: %v", res[0])
	}
	subs := b.Conn().NumSubscriptions() // the reply subscription, and jetstream's of Dial's check

	time.AfterFunc(200*time.Millisecond, func() { srv.Restart(t) })
	start := time.Now()
	res := b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{event(silent, 1)})
	if err := res[0]; err == nil || broker.IsPermanent(err) || !errors.Is(err, natsbroker.ErrNotConnected) {
		t.Errorf("in flight across the restart: %v; want a transient ErrNotConnected", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the call in flight took %v to fail; the loss must be seen within a connection check", d)
	}

	for i := 2; ; i++ {
		res := b.Publish(ctxFor(t, 2*time.Second), []outbox.Event{event(subject, i), event(subject, i+1000)})
		if res[0] == nil && res[1] == nil {
			break
		}
		for _, err := range res {
			if broker.IsPermanent(err) {
				t.Fatalf("permanent error after the restart: %v", err)
			}
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("no successful Publish after the server came back: %v", res)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := b.Conn().Stats(); st.Reconnects == 0 {
		t.Errorf("stats %+v: the connection never reconnected, the test proves nothing", st)
	}
	if n := b.Conn().NumSubscriptions(); n != subs {
		t.Errorf("%d subscriptions after the reconnect, %d before; want the same reply subscription", n, subs)
	}
}

// Publish after Close fails with ErrClosed, and a second broker on the same
// connection has a reply subscription of its own.
func TestTwoBrokersOnOneConnection(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	admin := connect(t, srv.URL())
	js, _ := jetstream.New(admin)
	subject := uniqueName("two")
	createStream(t, js, subject, jetstream.MemoryStorage)
	nc := connect(t, srv.URL())
	b1, err := natsbroker.New(nc, natsbroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := natsbroker.New(nc, natsbroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range []*natsbroker.Broker{b1, b2, b1} {
		if res := b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{event(subject, i)}); res[0] != nil {
			t.Fatalf("publish %d: %v", i, res[0])
		}
	}
	if n := nc.NumSubscriptions(); n != 2 {
		t.Errorf("%d subscriptions for two brokers; want 2", n)
	}
	if err := b1.Close(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if res := b1.Publish(ctxFor(t, 5*time.Second), []outbox.Event{event(subject, 9)}); !errors.Is(res[0], natsbroker.ErrClosed) {
		t.Errorf("Publish after Close: %v; want ErrClosed", res[0])
	}
	if res := b2.Publish(ctxFor(t, 10*time.Second), []outbox.Event{event(subject, 10)}); res[0] != nil {
		t.Errorf("the other broker after the first closed: %v", res[0])
	}
	_ = b2.Close(ctxFor(t, 5*time.Second))
	if n := nc.NumSubscriptions(); n != 0 {
		t.Errorf("%d subscriptions after both Close; want 0", n)
	}
}
