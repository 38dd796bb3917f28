package cli

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/examples/orders"
	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// runDemo tells an order service's story on the embedded default: SQLite in a temp
// file and an embedded NATS JetStream, a relay as a real child process that
// is SIGKILLed mid-batch and restarted, three consumers with inboxes, one of
// them failing three times, one "crashing" before its acks. The summary is
// computed from the tables afterwards.
func runDemo(ctx context.Context, e env, args []string) error {
	fs := newFlags(e, "demo", "demo [--orders 500] [--keep] [--db URL --broker nats://…]")
	fs.db = "" // embedded by default, whatever OUTBOX_DB says
	brokerURL := fs.String("broker", "", "a NATS server instead of the embedded one")
	var n int
	fs.intFlag(&n, "orders", 500, 50, 100_000, "orders to pay")
	keep := fs.Bool("keep", false, "keep the temp directory (SQLite file, NATS store) for a look afterwards")
	serve := fs.String("serve", "", "after the story, keep the relay running (a new order every second) and serve the dashboard, /status and /healthz on this address, e.g. 127.0.0.1:8080 (a bare :port binds 127.0.0.1); "+dashboardTokenEnv+" enables the dashboard's actions")
	if err := fs.parse(e, args); err != nil {
		return err
	}
	if len(fs.posArgs()) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", wire.ErrUsage, fs.posArgs()[0])
	}
	if err := checkBrokerURL(*brokerURL, false); err != nil {
		return err
	}
	if err := natsOnly("demo", *brokerURL); err != nil {
		return err
	}
	serveAddr, err := loopbackAddr("serve", *serve)
	if err != nil {
		return err
	}
	*serve = serveAddr
	d := &demo{out: e.stdout, orders: n, serve: *serve, dbURL: fs.db, natsURL: *brokerURL, table: "outbox", inboxTable: inbox.DefaultTable}
	if d.dbURL != "" {
		// Someone else's database: tables of our own, dropped and made anew.
		d.table, d.inboxTable = "demo_outbox", "demo_inbox"
	}
	dir, err := os.MkdirTemp("", "outbox-demo-")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Fprintf(e.stdout, "demo: files in %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	return d.run(ctx, dir)
}

type demo struct {
	out    io.Writer
	orders int
	serve  string

	dbURL, natsURL    string
	table, inboxTable string
	dialect           orders.Dialect
	db                *sql.DB
	st                driver.Store
	in                *inbox.Inbox
	relay             *exec.Cmd
	relayDone         chan struct{}
	consumerErrs      atomic.Int64
	lastErr           atomic.Value
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, "demo: "+format+"\n", args...) }

func (d *demo) run(ctx context.Context, dir string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := time.Now()
	d.say("an order service pays %d orders; points, shipping and notifications must each apply every payment once", d.orders)

	// The embedded default: SQLite file + NATS JetStream in this process.
	if d.natsURL == "" {
		ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: filepath.Join(dir, "nats"), NoLog: true, NoSigs: true})
		if err != nil {
			return fmt.Errorf("embedded NATS: %w", err)
		}
		go ns.Start()
		defer ns.Shutdown()
		if !ns.ReadyForConnections(10 * time.Second) {
			return errors.New("embedded NATS did not start within 10s")
		}
		d.natsURL = ns.ClientURL()
	}
	if d.dbURL == "" {
		d.dbURL = "sqlite:" + filepath.Join(dir, "demo.db")
	}
	var err error
	var dialect string
	if d.db, dialect, err = wire.SQLDB(d.dbURL); err != nil {
		return err
	}
	defer d.db.Close()
	d.dialect = orders.Dialect(dialect)
	if d.table != "outbox" {
		for _, t := range []string{d.table, d.table + "_archive", d.table + "_migrations", d.table + "_claims", d.table + "_shards", d.table + "_relays", d.inboxTable, d.inboxTable + "_versions"} {
			if _, err := d.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
				return err
			}
		}
		if err := orders.Drop(ctx, d.db); err != nil {
			return err
		}
	}
	if d.st, err = wire.OpenStore(ctx, d.dbURL, store.Options{Table: d.table}); err != nil {
		return err
	}
	defer d.st.Close()
	if err := d.st.Migrate(ctx); err != nil {
		return err
	}
	if err := orders.Migrate(ctx, d.db, d.dialect); err != nil {
		return err
	}
	if d.in, err = inbox.New(d.db, inbox.Config{Table: d.inboxTable}); err != nil {
		return err
	}
	if err := d.in.Migrate(ctx); err != nil {
		return err
	}
	nc, err := nats.Connect(d.natsURL)
	if err != nil {
		return wire.ScrubError(err, d.natsURL)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// The stream the Quick start creates (`outbox broker setup`), kept as
	// it is on someone else's server: only the story's subject is emptied
	// and its consumers of an earlier run are removed.
	if _, err := natsbroker.EnsureStream(ctx, nc, "ORDERS", []string{"orders.>"}); err != nil {
		return err
	}
	ordersStream, err := js.Stream(ctx, "ORDERS")
	if err != nil {
		return err
	}
	if err := ordersStream.Purge(ctx, jetstream.WithPurgeSubject(orders.Topic)); err != nil {
		return err
	}
	for _, c := range []orders.Consumer{orders.Points, orders.Shipping, orders.Notifications} {
		if err := ordersStream.DeleteConsumer(ctx, c.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return err
		}
	}
	d.say("database %s (%s), NATS JetStream at %s", wire.Mask(d.dbURL), d.dialect, wire.Mask(d.natsURL))
	defer d.stopRelay()

	// Consumers, with the story's faults.
	var wg sync.WaitGroup
	onErr := func(err error) { d.consumerErrs.Add(1); d.lastErr.Store(err.Error()) }
	const flakyOrder = 7
	shippingFailures := atomic.Int64{}
	opts := map[string]orders.RunOptions{
		"points": {OnError: onErr},
		"shipping": {OnError: onErr, Fail: func(e orders.OrderPaid, delivery uint64) error {
			if e.OrderID == flakyOrder && delivery <= 3 {
				shippingFailures.Add(1)
				return errors.New("carrier API timed out")
			}
			return nil
		}},
		"notifications": {OnError: onErr, AckWait: 2 * time.Second, DropAck: func(e orders.OrderPaid, delivery uint64) bool {
			return e.OrderID%61 == 0 && delivery == 1 // "crash" after commit, before the ack
		}},
	}
	for _, c := range []orders.Consumer{orders.Points, orders.Shipping, orders.Notifications} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(ctx, js, "ORDERS", d.in, d.dialect, opts[c.Name]); err != nil && ctx.Err() == nil {
				onErr(err)
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()

	// The order service: create, then pay with four concurrent clients;
	// every 20th payment is declined after its event was written.
	svc := &orders.Service{DB: d.db, Dialect: d.dialect, Outbox: d.st}
	declined := d.orders / 20
	ids := make([]int64, d.orders+declined)
	for i := range ids {
		if ids[i], err = svc.Create(ctx, fmt.Sprintf("customer-%d", i%37), int64(1000+i*7)); err != nil {
			return err
		}
	}
	var paid atomic.Int64
	payErr := make(chan error, 4)
	var pay sync.WaitGroup
	for w := 0; w < 4; w++ {
		pay.Add(1)
		go func() {
			defer pay.Done()
			for i := w; i < len(ids); i += 4 {
				err := svc.Pay(ctx, ids[i], i%21 == 20)
				switch {
				case errors.Is(err, orders.ErrDeclined):
				case err != nil:
					payErr <- err
					return
				default:
					paid.Add(1)
				}
			}
		}()
	}

	// Watch, kill the relay mid-batch once, wait for the end.
	killed, killTried := false, false
	progress := newProgress(d.out)
	deadline := time.Now().Add(90 * time.Second)
	payDone := make(chan struct{})
	go func() { pay.Wait(); close(payDone) }()
	for {
		select {
		case err := <-payErr:
			return err
		default:
		}
		counts, err := d.processed(ctx)
		if err != nil {
			return err
		}
		s, err := d.st.Stats(ctx)
		if err != nil {
			return err
		}
		progress.show(fmt.Sprintf("paid %d/%d · in outbox %d · processed: points %d, shipping %d, notifications %d",
			paid.Load(), d.orders, s.Pending(), counts["points"], counts["shipping"], counts["notifications"]))
		if !killTried && paid.Load() >= int64(d.orders)/3 {
			// The relay starts only now, with a backlog: a relay that keeps
			// up (PostgreSQL wakes it on every commit) holds each batch
			// for a millisecond or two, too short to be caught mid-batch.
			killTried = true
			if s, err = d.st.Stats(ctx); err != nil {
				return err
			}
			progress.line(fmt.Sprintf("starting the relay with %d events waiting in the outbox", s.Pending()))
			if err := d.startRelay(); err != nil {
				return err
			}
			inFlight, err := d.killMidBatch(ctx)
			if err != nil {
				return err
			}
			killed = inFlight > 0
			progress.line(fmt.Sprintf("relay SIGKILLed mid-batch with %d events claimed and unacknowledged; restarting it", inFlight))
			if err := d.startRelay(); err != nil {
				return err
			}
		}
		select {
		case <-payDone:
			if s.Pending() == 0 && counts["points"] >= paid.Load() && counts["shipping"] >= paid.Load() && counts["notifications"] >= paid.Load() && d.consumersIdle(ctx, js) {
				progress.done()
				if err := d.summary(ctx, killed, shippingFailures.Load(), started); err != nil || d.serve == "" {
					return err
				}
				return d.serveUntilStopped(ctx, svc)
			}
		default:
		}
		if time.Now().After(deadline) {
			progress.done()
			d.summary(ctx, killed, shippingFailures.Load(), started) //nolint:errcheck // printed for diagnosis
			return fmt.Errorf("demo did not finish within 90s (last consumer error: %v)", d.lastErr.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (d *demo) startRelay() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The URLs go through the environment, not the arguments, which any
	// local user can read (ps).
	d.relay = exec.Command(self, "relay", "--table", d.table, "--lease", "2s", "--batch", "20", "--poll", "100ms", "--log-level", "error")
	d.relay.Env = append(os.Environ(), "OUTBOX_DB="+d.dbURL, "OUTBOX_BROKER="+d.natsURL)
	d.relay.Stderr = os.Stderr
	if err := d.relay.Start(); err != nil {
		return fmt.Errorf("starting the relay process: %w", err)
	}
	done := make(chan struct{})
	d.relayDone = done
	go func(c *exec.Cmd) { _ = c.Wait(); close(done) }(d.relay)
	return nil
}

// killMidBatch lets the relay run in slices of a millisecond, freezing it
// (SIGSTOP) between them to look at the table: once the frozen relay holds
// claimed events, which it can then neither acknowledge nor release, it
// SIGKILLs it and returns how many it held. Watching a relay that runs
// freely missed the moment on PostgreSQL, where a batch is claimed and
// acknowledged within a millisecond or two and a backlog of hundreds is
// gone in tens of milliseconds.
func (d *demo) killMidBatch(ctx context.Context) (int64, error) {
	p := d.relay.Process
	// Each look is a Stats query, which took up to 300 ms on a busy
	// PostgreSQL, so the relay may need many looks to get through its start.
	until := time.Now().Add(30 * time.Second)
	for time.Now().Before(until) {
		_ = p.Signal(syscall.SIGSTOP)
		s, err := d.st.Stats(ctx)
		if err != nil {
			_ = p.Signal(syscall.SIGCONT)
			return 0, err
		}
		if s.Sending > 0 {
			d.killRelay()
			return s.Sending, nil
		}
		_ = p.Signal(syscall.SIGCONT)
		time.Sleep(time.Millisecond)
	}
	d.killRelay()
	return 0, nil
}

func (d *demo) killRelay() {
	_ = d.relay.Process.Signal(syscall.SIGKILL)
	<-d.relayDone
}

func (d *demo) stopRelay() {
	if d.relay == nil {
		return
	}
	_ = d.relay.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.relayDone:
	case <-time.After(11 * time.Second):
		d.killRelay()
	}
}

// serveUntilStopped keeps the story going (one paid order a second) and
// serves the live figures and the dashboard until SIGINT/SIGTERM. The
// story's relay, a child process, gives way to one in this process, so
// that the dashboard shows its health and delivery rate.
func (d *demo) serveUntilStopped(ctx context.Context, svc *orders.Service) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	d.stopRelay()
	d.relay = nil
	bctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	br, err := wire.OpenBroker(bctx, d.natsURL)
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = br.Close(cctx)
	}()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := relay.New(d.st, br, relay.Config{LeaseFor: 2 * time.Second, BatchSize: 20, PollInterval: 100 * time.Millisecond, Logger: log})
	if err != nil {
		return err
	}
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); _ = r.Run(rctx) }()
	defer func() { stopRelay(); <-relayDone }()
	token := strings.TrimSpace(os.Getenv(dashboardTokenEnv))
	dash, err := newDashboard(d.st, r, token, nil, "Actions are off: restart `outbox demo --serve ADDR` with "+dashboardTokenEnv+" set to a secret token, then enter it here.", log)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", wire.ErrUsage, dashboardTokenEnv, err)
	}
	defer dash.Close()
	mux := http.NewServeMux()
	mux.Handle("/", dash)
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		s, err := d.st.Stats(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		counts, _ := d.processed(r.Context())
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"new": s.New, "sending": s.Sending, "dead": s.Dead, "retrying": s.Retrying, "blocked_keys": s.BlockedKeys,
			"oldest_pending_seconds": s.OldestPending.Seconds(), "processed": counts,
		})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		s, err := d.st.Stats(r.Context())
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case s.OldestPending > 30*time.Second:
			http.Error(w, fmt.Sprintf("delivery stalled: oldest pending event is %s old", s.OldestPending.Round(time.Second)), http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	srv := &http.Server{Addr: d.serve, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", d.serve)
	if err != nil {
		return fmt.Errorf("%w: --serve %s: %v", wire.ErrUsage, d.serve, err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	actions := "read-only: set " + dashboardTokenEnv + " to enable retry, skip and purge"
	if token != "" {
		actions = "actions enabled with the token in " + dashboardTokenEnv
	}
	d.say("dashboard at http://%s/ (%s); also /status and /healthz; a new order is paid every second; Ctrl-C to stop", ln.Addr(), actions)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		id, err := svc.Create(ctx, fmt.Sprintf("customer-%d", i%37), 1500)
		if err == nil {
			err = svc.Pay(ctx, id, false)
		}
		if err != nil && ctx.Err() == nil {
			d.say("order service: %v", err)
		}
	}
}

// consumersIdle reports whether every consumer has acknowledged all it was
// sent (the unacknowledged ones come back as duplicates first).
func (d *demo) consumersIdle(ctx context.Context, js jetstream.JetStream) bool {
	for _, name := range []string{"points", "shipping", "notifications"} {
		c, err := js.Consumer(ctx, "ORDERS", name)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		if err != nil || info.NumAckPending > 0 || info.NumPending > 0 {
			return false
		}
	}
	return true
}

// processed counts each consumer's inbox records.
func (d *demo) processed(ctx context.Context) (map[string]int64, error) {
	rows, err := d.db.QueryContext(ctx, "SELECT consumer, count(*) FROM "+d.in.Table()+" GROUP BY consumer")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var c string
		var n int64
		if err := rows.Scan(&c, &n); err != nil {
			return nil, err
		}
		out[c] = n
	}
	return out, rows.Err()
}

// summary reads the invariants back from the tables and prints the line.
func (d *demo) summary(ctx context.Context, killed bool, shippingFailures int64, started time.Time) error {
	q := func(query string) int64 {
		var n int64
		if err := d.db.QueryRowContext(ctx, query).Scan(&n); err != nil {
			d.say("query failed: %v", err)
			return -1
		}
		return n
	}
	inbox := d.in.Table()
	committed := q("SELECT count(*) FROM orders WHERE status = 'PAID' AND paid_event_id IS NOT NULL")
	delivered := q("SELECT count(*) FROM orders o WHERE o.status = 'PAID' AND (SELECT count(DISTINCT consumer) FROM " + inbox + " i WHERE CAST(i.event_id AS CHAR(36)) = o.paid_event_id) = 3")
	phantom := q("SELECT count(DISTINCT event_id) FROM " + inbox + " WHERE CAST(event_id AS CHAR(36)) NOT IN (SELECT paid_event_id FROM orders WHERE status = 'PAID' AND paid_event_id IS NOT NULL)")
	dups := q("SELECT count(*) FROM deliveries WHERE outcome = 'duplicate'")
	redelivered := q("SELECT count(*) FROM deliveries WHERE num_delivered > 1")
	effects := map[string]int64{
		"points_ledger": q("SELECT count(*) FROM points_ledger"),
		"shipments":     q("SELECT count(*) FROM shipments"),
		"notifications": q("SELECT count(*) FROM notifications"),
	}
	lost := committed - delivered
	d.say("relay killed mid-batch and restarted: %v; shipping failed %d times on order 7 and then recovered; %d redeliveries in all", killed, shippingFailures, redelivered)
	for table, n := range effects {
		if n != committed {
			d.say("INVARIANT BROKEN: %s has %d rows for %d paid orders", table, n, committed)
			lost = max(lost, 1)
		}
	}
	fmt.Fprintf(d.out, "demo: %d events committed, %d delivered, %d lost, %d phantom, %d duplicates absorbed (%.1fs)\n",
		committed, delivered, lost, phantom, dups, time.Since(started).Seconds())
	switch {
	case committed <= 0 || lost != 0 || phantom != 0:
		return errors.New("an invariant failed: see above")
	case !killed:
		return errors.New("the relay was never caught mid-batch; the story is incomplete")
	case shippingFailures < 3:
		return errors.New("the shipping consumer's failures did not happen")
	case dups == 0:
		return errors.New("no duplicate delivery reached an inbox; the story is incomplete")
	}
	return nil
}

// progress rewrites one line on a terminal, or prints a line every 2 s.
type progress struct {
	w     io.Writer
	tty   bool
	last  time.Time
	shown bool
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) show(s string) {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K  %s", s)
		p.shown = true
		return
	}
	if time.Since(p.last) >= 2*time.Second {
		fmt.Fprintf(p.w, "  %s\n", s)
		p.last = time.Now()
	}
}

func (p *progress) line(s string) {
	p.done()
	fmt.Fprintf(p.w, "demo: %s\n", s)
}

func (p *progress) done() {
	if p.tty && p.shown {
		fmt.Fprintln(p.w)
		p.shown = false
	}
}
