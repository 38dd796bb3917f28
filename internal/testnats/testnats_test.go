package testnats_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox/internal/testnats"
)

// A file stream created just after the account's only other stream was
// deleted, 200 times, on the embedded server: every creation succeeds. Without the
// anchor stream nats-server's cleanup of the emptied streams directory
// made some fail ("error creating store for stream").
func TestStreamCreatedWhileTheLastIsDeleted(t *testing.T) {
	srv := testnats.Start(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	create := func(name string) error {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name}, Storage: jetstream.FileStorage})
		return err
	}
	prev := "S0"
	if err := create(prev); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for i := 1; i <= 200; i++ {
		// The deletion's cleanup runs in goroutines after its reply:
		// create the next stream right after it.
		next := fmt.Sprintf("S%d", i)
		if err := js.DeleteStream(ctx, prev); err != nil {
			t.Fatalf("delete %s: %v", prev, err)
		}
		if err := create(next); err != nil {
			failed++
			t.Errorf("create %s just after %s was deleted: %v", next, prev, err)
			if err := create(next); err != nil {
				t.Fatalf("create %s again: %v", next, err)
			}
		}
		prev = next
	}
	if failed > 0 {
		t.Errorf("%d of 200 creations failed", failed)
	}
}
