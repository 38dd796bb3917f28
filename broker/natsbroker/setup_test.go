package natsbroker_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/internal/testnats"
)

// EnsureStream creates the stream, is a no-op the second time, adds only
// the subjects a stream lacks, and the relay's events on them are then
// stored; a subject another stream has is refused naming that stream.
func TestEnsureStream(t *testing.T) {
	url := testnats.Shared(t)
	nc := connect(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.ToUpper(uniqueName("SETUP"))
	prefix := strings.ToLower(name)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	ctx := ctxFor(t, 30*time.Second)

	res, err := natsbroker.EnsureStream(ctx, nc, name, []string{prefix})
	if err != nil || !res.Created || len(res.Added) != 0 {
		t.Fatalf("first call: %+v %v; want created", res, err)
	}
	res, err = natsbroker.EnsureStream(ctx, nc, name, []string{prefix})
	if err != nil || res.Created || len(res.Added) != 0 {
		t.Fatalf("second call: %+v %v; want nothing done", res, err)
	}
	res, err = natsbroker.EnsureStream(ctx, nc, name, []string{prefix, prefix + ".>", prefix + ".>"})
	if err != nil || res.Created || !slices.Equal(res.Added, []string{prefix + ".>"}) {
		t.Fatalf("third call: %+v %v; want %s.> added once", res, err, prefix)
	}
	s, err := js.Stream(ctx, name)
	if err != nil || !slices.Equal(s.CachedInfo().Config.Subjects, []string{prefix, prefix + ".>"}) {
		t.Fatalf("stream subjects: %v %v", s.CachedInfo().Config.Subjects, err)
	}

	b := dial(t, url, natsbroker.Config{})
	events := []outbox.Event{event(prefix, 0), event(prefix+".paid", 1)}
	for i, err := range b.Publish(ctx, events) {
		if err != nil {
			t.Errorf("event on %s: %v", events[i].Topic, err)
		}
	}
	if info, err := s.Info(ctx); err != nil || info.State.Msgs != 2 {
		t.Errorf("stream holds %+v (%v); want 2 messages", info.State, err)
	}

	other := name + "_OTHER"
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), other) })
	_, err = natsbroker.EnsureStream(ctx, nc, other, []string{prefix + ".paid"})
	if err == nil || !strings.Contains(err.Error(), `overlaps the subjects of stream "`+name+`"`) {
		t.Errorf("overlapping subject: %v; want an error naming stream %s", err, name)
	}
	if _, err := natsbroker.EnsureStream(ctx, nc, other, nil); err == nil {
		t.Error("no subjects: no error")
	}
}

// Create the stream the relay's topics need before the first event, so
// that none goes DEAD for want of one (what `outbox broker setup` does).
// Not run by go test: it needs a server.
func ExampleEnsureStream() {
	b, err := natsbroker.Dial("nats://127.0.0.1:4222", natsbroker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(context.Background())
	res, err := natsbroker.EnsureStream(context.Background(), b.Conn(), "ORDERS", []string{"orders", "orders.>"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created:", res.Created, "subjects added:", res.Added)
}
