package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/pgstore"
	"github.com/outbox-go/outbox/testkit/teststores"
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
		if err := writer.Enqueue(ctx, outbox.Message{Topic: "t", Key: fmt.Sprintf("k%d", i), Type: "T", Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Millisecond)
	}
	waitFor(t, "the whole burst, long before the 10 s poll", 2*time.Second, func() bool { return len(mb.Events("t")) == burst })
	t.Logf("a burst of %d with one notification delivered in %v", burst, time.Since(start).Round(time.Millisecond))
}

// A producer in another language inserts with plain SQL and sends no
// notification. The relay polls only every 30 s here, so each event must be
// found by the store's probe of the newest id (PostgreSQL, MariaDB) or of
// the file's data version (SQLite), within well under a second.
func TestPlainSQLCommitsAreNoticedWithoutAPoll(t *testing.T) {
	for _, kind := range teststores.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			o := teststores.Open(t, kind, store.Options{})
			ctx := context.Background()
			mb := newMem(t, membroker.Config{})
			cfg := fastConfig()
			cfg.PollInterval = 30 * time.Second
			run(t, o.Store, mb, cfg)
			time.Sleep(300 * time.Millisecond) // let the relay go idle
			insert := "INSERT INTO " + o.Opts.Table + " (topic, event_key, event_type, payload) VALUES (?, ?, 'Plain', ?)"
			if kind == "postgres" {
				insert = "INSERT INTO " + o.Opts.Table + " (topic, event_key, event_type, payload) VALUES ($1, $2, 'Plain', $3)"
			}
			var worst time.Duration
			for i := range 10 {
				start := time.Now()
				if _, err := o.DB.ExecContext(ctx, insert, "t", fmt.Sprintf("k%d", i%3), []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
				waitFor(t, fmt.Sprintf("plain-SQL event %d, long before the 30 s poll", i+1), 3*time.Second, func() bool { return len(mb.Events("t")) == i+1 })
				worst = max(worst, time.Since(start))
				time.Sleep(time.Duration(20+i*10) * time.Millisecond) // idle gaps of varied length
			}
			t.Logf("%s: 10 plain-SQL events, slowest commit → delivery %v", kind, worst.Round(time.Millisecond))
		})
	}
}
