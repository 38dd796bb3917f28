package torture_test

// Deliberately broken relays, for proving that the checker catches the bugs
// the outbox is built to avoid. They exist only in this test binary: the
// test re-executes itself as a relay process (TestMain sees variantEnv),
// so the faults (SIGKILL, SIGSTOP, proxies) hit them exactly as they hit a
// real `outbox relay`.

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/cmd/outbox/internal/torture"
	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// variantEnv names the broken relay a re-executed test binary runs.
const variantEnv = "OUTBOX_TORTURE_VARIANT"

// variant is one deliberately broken relay and the deterministic scenario
// that exposes it.
type variant struct {
	name    string
	bug     string                                // what is broken
	pending string                                // why it cannot run yet
	store   string                                // the store kind of its scenario
	setup   func(c *torture.Config)               // the scenario
	caught  func(r torture.Report) (bool, string) // what the checker must report
	// wrap breaks a working relay; hwm replaces it with a poller.
	wrap func(st driver.Store, br broker.Broker, dbURL, table string) (driver.Store, broker.Broker, error)
	run  func(ctx context.Context, dbURL, table string, br broker.Broker, poll time.Duration) error
}

// variants: one line (plus its code) per known bug class.
var variants = []variant{
	{
		name: "hwm-poller", bug: "a poller that claims rows with id > a high-water mark instead of by status",
		store: "postgres", run: runHWMPoller,
		setup: func(c *torture.Config) {
			c.Relays, c.Writers, c.Hold, c.HoldMax = 1, 4, 0.3, 300*time.Millisecond
			c.Schedule = []torture.Fault{} // no fault needed: out-of-order commits suffice
		},
		caught: func(r torture.Report) (bool, string) { return r.Lost > 0, fmt.Sprintf("lost=%d", r.Lost) },
	},
	{
		name: "confirm-early", bug: "marks a batch sent before the broker confirmed it (fire-and-forget publish)",
		store: "postgres", wrap: confirmEarly,
		setup: func(c *torture.Config) {
			c.Relays = 2
			c.Schedule = []torture.Fault{
				{At: 2 * time.Second, Kind: torture.BrokerBlackhole, For: 1500 * time.Millisecond},
				{At: 5 * time.Second, Kind: torture.BrokerBlackhole, For: 1500 * time.Millisecond},
			}
		},
		caught: func(r torture.Report) (bool, string) { return r.Lost > 0, fmt.Sprintf("lost=%d", r.Lost) },
	},
	{
		name: "unfenced-ack", bug: "acknowledges by id (DELETE … WHERE id IN …) without checking the lease's owner and epoch",
		store: "postgres", wrap: unfencedAck,
		setup: func(c *torture.Config) {
			c.Relays = 2
			c.LinkLatency = 100 * time.Millisecond // batches stay in flight for a while
			c.Schedule = []torture.Fault{
				{At: 2 * time.Second, Kind: torture.Stop, Relay: 0, For: 4100 * time.Millisecond},
				{At: 7 * time.Second, Kind: torture.Stop, Relay: 1, For: 4250 * time.Millisecond},
				{At: 12 * time.Second, Kind: torture.Stop, Relay: 0, For: 4350 * time.Millisecond},
			}
		},
		caught: func(r torture.Report) (bool, string) {
			return r.StaleWrites > 0, fmt.Sprintf("stale_writes=%d (lost=%d: acks carry only confirmed ids, so the stale ack shows as a fencing violation, not a loss)", r.StaleWrites, r.Lost)
		},
	},
	{
		name: "cdc-flush-before-confirm", bug: "a CDC source that advances the slot's flush LSN before the broker confirmed",
		pending: "no CDC source exists yet (source/pgcdc); this variant lands with it",
	},
}

func findVariant(name string) (variant, bool) {
	for _, v := range variants {
		if v.name == name {
			return v, true
		}
	}
	return variant{}, false
}

// variantCommand runs the broken relay name as a process with the
// arguments of `outbox relay`.
func variantCommand(name string) func(args []string) *exec.Cmd {
	return func(args []string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), variantEnv+"="+name)
		return cmd
	}
}

// variantRelayMain is the broken relay process: `outbox relay` with a
// wrapped store or broker, or the high-water-mark poller.
func variantRelayMain(name string, args []string) int {
	v, ok := findVariant(name)
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown variant %q\n", name)
		return 2
	}
	fs := flag.NewFlagSet("variant relay", flag.ContinueOnError)
	var cfg relay.Config
	dbURL := fs.String("db", "", "")
	table := fs.String("table", "", "")
	brokerURL := fs.String("broker", "", "")
	fs.StringVar(&cfg.Owner, "owner", "", "")
	fs.DurationVar(&cfg.LeaseFor, "lease", 2*time.Second, "")
	fs.IntVar(&cfg.BatchSize, "batch", 50, "")
	fs.DurationVar(&cfg.PollInterval, "poll", 50*time.Millisecond, "")
	fs.DurationVar(&cfg.BackoffBase, "backoff", 50*time.Millisecond, "")
	fs.DurationVar(&cfg.BackoffMax, "backoff-max", time.Second, "")
	fs.DurationVar(&cfg.PublishTimeout, "publish-timeout", 2*time.Second, "")
	fs.IntVar(&cfg.MaxAttempts, "max-attempts", 1000, "")
	fs.String("log-level", "warn", "")
	fs.String("source", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, err := wire.OpenStore(ctx, *dbURL, store.Options{Table: *table})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer st.Close()
	br, err := wire.OpenBroker(ctx, *brokerURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer br.Close(context.Background())
	if v.run != nil {
		if err := v.run(ctx, *dbURL, *table, br, cfg.PollInterval); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	st, br, err = v.wrap(st, br, *dbURL, *table)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	r, err := relay.New(st, br, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = r.Run(ctx)
	return 0
}

// runHWMPoller is the classic broken poller: remember the highest id sent
// and ask only for ids above it. A transaction that took a lower id and
// commits after a higher one is skipped forever.
func runHWMPoller(ctx context.Context, dbURL, table string, br broker.Broker, poll time.Duration) error {
	db, dialect, err := wire.SQLDB(dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	eventID, ph := "event_id", "?"
	if dialect == "postgres" {
		eventID, ph = "CAST(event_id AS TEXT)", "$1"
	}
	q := "SELECT id, " + eventID + ", topic, event_key, event_type, payload FROM " + table + " WHERE id > " + ph + " ORDER BY id LIMIT 100"
	var mark int64
	for ctx.Err() == nil {
		events, err := hwmBatch(ctx, db, q, mark)
		if err != nil || len(events) == 0 {
			time.Sleep(poll)
			continue
		}
		results := br.Publish(ctx, events)
		var sent []int64
		for i, e := range events {
			if results[i] != nil {
				break
			}
			sent = append(sent, e.ID)
		}
		if len(sent) == 0 {
			time.Sleep(poll)
			continue
		}
		if _, err := db.ExecContext(ctx, "DELETE FROM "+table+" WHERE id IN ("+idList(sent)+")"); err != nil {
			continue
		}
		mark = sent[len(sent)-1]
	}
	return nil
}

func hwmBatch(ctx context.Context, db *sql.DB, q string, mark int64) ([]outbox.Event, error) {
	rows, err := db.QueryContext(ctx, q, mark)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []outbox.Event
	for rows.Next() {
		var e outbox.Event
		if err := rows.Scan(&e.ID, &e.EventID, &e.Topic, &e.Key, &e.Type, &e.Payload); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func idList(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}

// confirmEarly wraps the broker so that Publish reports success at once and
// publishes in the background: the relay acknowledges events the broker
// never confirmed, and a fault in between loses them.
func confirmEarly(st driver.Store, br broker.Broker, _, _ string) (driver.Store, broker.Broker, error) {
	return st, &earlyBroker{Broker: br}, nil
}

type earlyBroker struct {
	broker.Broker
	wg sync.WaitGroup
}

func (b *earlyBroker) Publish(ctx context.Context, events []outbox.Event) []error {
	evs := append([]outbox.Event(nil), events...)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		b.Broker.Publish(pctx, evs) // results ignored: "it was sent"
	}()
	return make([]error, len(events))
}

func (b *earlyBroker) Close(ctx context.Context) error {
	b.wg.Wait()
	return b.Broker.Close(ctx)
}

// unfencedAck wraps the store so that Ack deletes by id alone, without the
// compare-and-swap on the lease's (owner, epoch): a relay that stalled past
// its lease deletes rows another relay now holds.
func unfencedAck(st driver.Store, br broker.Broker, dbURL, table string) (driver.Store, broker.Broker, error) {
	db, _, err := wire.SQLDB(dbURL) // same application_name as the relay: the probe sees who wrote
	if err != nil {
		return nil, nil, err
	}
	return &unfencedStore{Store: st, db: db, table: table}, br, nil
}

type unfencedStore struct {
	driver.Store
	db    *sql.DB
	table string
}

func (u *unfencedStore) Ack(ctx context.Context, p driver.AckParams) error {
	lease, ids := p.Lease, p.IDs
	if len(ids) == 0 {
		return nil
	}
	if _, err := u.db.ExecContext(ctx, "DELETE FROM "+u.table+" WHERE id IN ("+idList(ids)+")"); err != nil {
		return err
	}
	// Drop the ids from the claim's bookkeeping too (pgstore keeps claims
	// in a table of their own), so that the only bug is the unfenced
	// DELETE and not keys held until the lease runs out. The rows are
	// gone, so the store calls this a lost lease: ignore it.
	_ = u.Store.Release(ctx, driver.ReleaseParams{Lease: lease, IDs: ids})
	return nil
}

func (u *unfencedStore) Close() error {
	u.db.Close()
	return u.Store.Close()
}
