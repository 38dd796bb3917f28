package relay_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/pgstore"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// A writer in "another process" (a store of its own, no in-process signal)
// coalesces its notifications: with NotifyInterval an hour, only the first
// enqueue of a burst notifies. The relay polls only every 10 s here, and
// its store does not probe, so the rest of the burst must be found by its
// re-checks after a round with events, within milliseconds.
func TestCoalescedWakeUpsStillDeliverPromptly(t *testing.T) {
	url := teststores.URL(t, "postgres")
	opts := store.Options{Table: teststores.UniqueTable("rn_")}
	ctx := context.Background()
	noProbe := opts
	noProbe.ProbeInterval = -1
	relayStore, err := pgstore.Open(ctx, url, pgstore.Config{Options: noProbe})
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

// claimCounter counts a store's claims; its wake-ups are the test's
// (wake), not the store's, and Watching says what watching does.
type claimCounter struct {
	*pgstore.Store
	n        atomic.Int64
	wake     chan struct{}
	watching bool
}

func (c *claimCounter) Claim(ctx context.Context, req driver.ClaimParams) (driver.Claim, error) {
	c.n.Add(1)
	return c.Store.Claim(ctx, req)
}

func (c *claimCounter) Notify(context.Context) <-chan struct{} { return c.wake }

func (c *claimCounter) Watching() bool { return c.watching }

// Where the store watches every commit (driver.Watcher: its probe runs),
// the relay makes no claims of its own after a round with events: each
// would mostly find nothing and hold back the claim a commit's wake-up
// brings. Without the probe it looks again 2, 10 and 50 ms after one. The
// store's own wake-ups are replaced by one the test sends, so the count
// is the relay's own claims: a store's probe may rightly wake it after
// the event for nothing (two wake-ups for one commit, a relay's ack seen
// ending), and under load one did, inside the window.
func TestNoLooksAgainWhereTheStoreWatches(t *testing.T) {
	for _, watching := range []bool{true, false} {
		t.Run(fmt.Sprintf("watching=%v", watching), func(t *testing.T) {
			probe := time.Duration(0) // the default: the probe runs
			if !watching {
				probe = -1
			}
			if w := teststores.Open(t, "postgres", store.Options{ProbeInterval: probe}).Store.(driver.Watcher).Watching(); w != watching {
				t.Fatalf("pgstore's Watching() = %v with ProbeInterval %v", w, probe)
			}
			o := teststores.Open(t, "postgres", store.Options{ProbeInterval: -1}) // the test's wake-up is the only one
			st := &claimCounter{Store: o.Store.(*pgstore.Store), wake: make(chan struct{}, 1), watching: watching}
			mb := newMem(t, membroker.Config{})
			cfg := fastConfig()
			cfg.PollInterval = 30 * time.Second
			run(t, st, mb, cfg)
			time.Sleep(300 * time.Millisecond) // the relay holds its shards and is idle
			if err := st.Enqueue(context.Background(), outbox.Message{Topic: "t", Key: "k", Type: "T", Payload: []byte("{}")}); err != nil {
				t.Fatal(err)
			}
			st.wake <- struct{}{}
			waitFor(t, "the event", 3*time.Second, func() bool { return len(mb.Events("t")) == 1 })
			before := st.n.Load()
			time.Sleep(200 * time.Millisecond)
			looks := st.n.Load() - before
			if watching && looks > 0 {
				t.Errorf("%d claims in the 200 ms after the event was delivered, with no wake-up, where the store watches every commit; want none", looks)
			}
			if !watching && looks < 1 {
				t.Errorf("no claim in the 200 ms after the event was delivered, where the store does not watch; want the looks again after 2, 10 and 50 ms")
			}
		})
	}
}
