package relay_test

import (
	"context"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// A transaction takes a lower id and stays open while later ones commit and
// are delivered; when it commits, its event is delivered too: nothing is
// skipped (no high-water mark). SQLite has a single writer, so a held-open
// write transaction would block the others: the case cannot arise there.
func TestOutOfOrderCommitIsNotSkipped(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			o := teststores.Open(t, kind, store.Options{})
			ctx := context.Background()
			held, err := o.DB.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Rollback()
			late := outbox.Message{Topic: "t", Key: "late", Type: "T", Payload: []byte("committed last, lowest id")}
			if err := o.Store.EnqueueTx(ctx, held, late); err != nil {
				t.Fatal(err)
			}
			msgs := workload(t, o.Store, "t", 100, 10)
			mb := newMem(t, membroker.Config{})
			run(t, o.Store, mb, fastConfig())
			waitFor(t, "the later transactions", 30*time.Second, func() bool { return len(mb.Events("t")) >= len(msgs) })
			if err := held.Commit(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the late commit", 30*time.Second, func() bool { return pending(t, o.Store).Pending() == 0 })
			checkDelivered(t, append(msgs, late), mb.Events("t"))
		})
	}
}
