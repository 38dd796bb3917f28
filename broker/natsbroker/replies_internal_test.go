package natsbroker

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testnats"
)

// sentCall registers an unordered call of one event on b as if the event
// were sent: the test plays its reply from another connection.
func sentCall(t *testing.T, b *Broker) *call {
	t.Helper()
	events := []outbox.Event{{ID: 1, Message: outbox.Message{EventID: "e", Topic: "t"}}}
	c, err := b.newCall(events, make([]error, 1), false)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.waiting[0], c.pending, c.sent = true, 1, true
	c.mu.Unlock()
	return c
}

func isDone(c *call) bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Replies go to the call their subject numbers, on the one subscription;
// a reply for a call that ended is dropped, even when another call is in
// flight.
func TestRepliesGoToTheirCallAndEndedCallsDropThem(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	other, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	b, err := New(nc, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(t.Context()) //nolint:errcheck

	send := func(subject, data string) {
		t.Helper()
		if err := other.Publish(subject, []byte(data)); err != nil {
			t.Fatal(err)
		}
		if err := other.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	waitDone := func(c *call) { // as await does: taking the replies that come
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := c.wait(ctx, c.done); err != nil {
			t.Fatalf("the reply did not reach its call: %v", err)
		}
	}

	a, c := sentCall(t, b), sentCall(t, b)
	if a.id == c.id || a.replies[0] == c.replies[0] {
		t.Fatalf("two calls share reply subject %q", a.replies[0])
	}
	if err := nc.Flush(); err != nil { // the SUB is in before the replies
		t.Fatal(err)
	}
	send(c.replies[0], `{"stream":"S", "seq":1}`)
	waitDone(c)
	if c.results[0] != nil || isDone(a) {
		t.Fatalf("after c's PubAck: c %v, a done %v; want c stored and a still waiting", c.results[0], isDone(a))
	}
	c.end()

	// c ended: a reply on its subject must reach nobody; a's comes after
	// it on the same subscription, so once a has its reply, c's was seen.
	send(c.replies[0], `{"error":{"code":503,"err_code":10077,"description":"x"},"stream":"S","seq":0}`)
	send(a.replies[0], `{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"S","seq":0}`)
	waitDone(a)
	if c.results[0] != nil {
		t.Errorf("a reply for an ended call changed its result: %v", c.results[0])
	}
	if a.results[0] == nil {
		t.Error("a's error reply was recorded as success")
	}
	a.end()
	b.replies.mu.Lock()
	left := len(b.replies.calls)
	b.replies.mu.Unlock()
	if left != 0 {
		t.Errorf("%d calls still registered after both ended", left)
	}
}

// The watch ends the epoch when the connection is seen not connected, or
// reconnected (even if connected again by then); a call that joins after a
// reconnect the watch has not seen yet starts a new epoch; the goroutine
// stops once no call is in flight.
func TestWatchSeesLostConnections(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	status, reconnects := nats.CONNECTED, uint64(0)
	set := func(s nats.Status, n uint64) {
		mu.Lock()
		status, reconnects = s, n
		mu.Unlock()
	}
	w := &watch{state: func() (nats.Status, uint64) {
		mu.Lock()
		defer mu.Unlock()
		return status, reconnects
	}}
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}

	lost1 := w.join()
	w.look()
	if closed(lost1) {
		t.Fatal("epoch ended on a healthy connection")
	}
	set(nats.CONNECTED, 1) // reconnected between two looks
	w.look()
	if !closed(lost1) {
		t.Fatal("a reconnect did not end the epoch")
	}
	lost2 := w.join()
	if closed(lost2) {
		t.Fatal("a call joining after the reconnect got the ended epoch")
	}
	set(nats.RECONNECTING, 1)
	w.look()
	if !closed(lost2) {
		t.Fatal("a lost connection did not end the epoch")
	}
	set(nats.CONNECTED, 2) // reconnected; the watch has not looked yet
	lost3 := w.join()
	if closed(lost3) {
		t.Fatal("a call joining after an unseen reconnect got an ended epoch")
	}
	w.look()
	if closed(lost3) {
		t.Fatal("the epoch the call began ended without a new loss")
	}
	for range 3 {
		w.leave()
	}
	select {
	case <-w.stopped():
	case <-time.After(10 * time.Second):
		t.Fatal("the watch goroutine did not stop with no call in flight")
	}
	lost4 := w.join() // starts the goroutine again
	w.leave()
	if closed(lost4) {
		t.Fatal("a healthy epoch ended")
	}
	select {
	case <-w.stopped():
	case <-time.After(10 * time.Second):
		t.Fatal("the restarted watch goroutine did not stop")
	}
}

// Once Close dropped the subscription, a call waiting for its PubAck gives
// up with ErrClosed at once; a reply already in the channel still counts,
// and one that comes after the call gave up changes nothing.
func TestCloseEndsTheWaitAndLaterRepliesAreIgnored(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := New(nc, Config{})
	if err != nil {
		t.Fatal(err)
	}
	ack := func(c *call) *nats.Msg {
		return &nats.Msg{Subject: c.replies[0], Data: []byte(`{"stream":"S", "seq":1}`)}
	}

	answered, waiting := sentCall(t, b), sentCall(t, b)
	// answered's PubAck is in the channel, not taken yet, when Close
	// drops the subscription (as if nats.go had just delivered it).
	b.replies.ch <- ack(answered)
	// The calls are not Publish's, so the gate has nothing to wait for,
	// but the connection watch runs until they end: an ended ctx stops
	// Close from waiting for it.
	expired, cancel := context.WithCancel(t.Context())
	cancel()
	_ = b.Close(expired)

	ctx, cancelWait := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancelWait()
	start := time.Now()
	err = waiting.wait(ctx, waiting.done)
	if err != ErrClosed {
		t.Fatalf("wait after Close = %v; want ErrClosed", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("wait took %v after Close", d)
	}
	if !isDone(answered) || answered.results[0] != nil {
		t.Errorf("the PubAck taken at Close: done %v, result %v; want stored", isDone(answered), answered.results[0])
	}
	waiting.stop(err)
	want := waiting.results[0]
	if want == nil || !errors.Is(want, ErrClosed) || strings.Contains(want.Error(), "reconnect") {
		t.Fatalf("result after Close = %v; want ErrClosed, saying nothing of reconnecting", want)
	}

	// A PubAck after the call gave up, from other calls' goroutines at once
	// (run with -race), is ignored.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { waiting.inbox.dispatch(ack(waiting)) })
	}
	wg.Wait()
	if waiting.results[0] != want {
		t.Errorf("a PubAck after Close changed the result to %v", waiting.results[0])
	}
	answered.end()
	waiting.end()
}
