package torture

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/internal/faultproxy"
	"github.com/outbox-go/outbox/store"
)

// Config describes one torture run. Zero values take the documented
// defaults.
type Config struct {
	// DB is the database URL (postgres://, mysql://, sqlite:). Required.
	DB string
	// Broker is the broker URL (nats://). Empty: an embedded NATS server
	// that the broker-restart fault can restart.
	Broker string
	// BrokerKind names the transport; default "nats".
	BrokerKind string
	// Source is passed to the relays as --source when set; empty: the
	// poller. pgcdc (PostgreSQL only) runs the logical replication source
	// on a slot and publication of the run's own.
	Source string
	// Seed makes the fault schedule and the workload's choices
	// reproducible; 0 picks a random one (printed in the summary).
	Seed uint64
	// Duration is how long the writers write, counted from the first
	// event's delivery; default 20s. Faults happen from 2 s after it; the
	// writers go on until 2 s after the last one healed if that is later.
	Duration time.Duration
	// Writers, Keys and Relays: concurrent writers (default 3), aggregates
	// (default 16) and relay processes (default 3).
	Writers, Keys, Relays int
	// Lease is the relays' --lease; default 2s.
	Lease time.Duration
	// WriterTimeout bounds each business transaction; default 1.5s.
	WriterTimeout time.Duration
	// Rollback and Hold are the shares of transactions rolled back after
	// enqueueing and held open before committing; defaults 0.1 each.
	// HoldMax is the longest hold; default 400ms (100ms on SQLite, where a
	// held transaction holds the only write lock).
	Rollback, Hold float64
	HoldMax        time.Duration
	// Pace is the mean pause between one writer's transactions; default 20ms.
	Pace time.Duration
	// Faults are the kinds to inject, in a seeded random order; nil means
	// ShortKinds for the store. Kinds that do not apply are dropped.
	Faults []Kind
	// Repeat cycles through Faults until the window is full.
	Repeat bool
	// Soak, with Faults nil, draws from every fault that applies
	// (SoakKinds) and repeats them until 4 s before the end. PGRestart adds
	// pg_ctlcluster restart, which disrupts every other user of the server.
	Soak, PGRestart bool
	// Schedule, when set, is used as is instead of a plan from Faults.
	Schedule []Fault
	// RelayBinary is the outbox command run as `outbox relay`; default the
	// running executable.
	RelayBinary string
	// RelayCommand, when set, builds the relay process from the arguments
	// of `outbox relay` instead (tests use it for deliberately broken
	// relays, which exist only in the test binary).
	RelayCommand func(args []string) *exec.Cmd
	// RelayArgs are extra arguments for every relay.
	RelayArgs []string
	// LinkLatency delays the relay↔broker link for the whole run (slow
	// publishes keep batches in flight longer); default none.
	LinkLatency time.Duration
	// HistoryDir receives the JSON history of a failed run; default the
	// system's temp directory.
	HistoryDir string
	// AlwaysWriteHistory writes the JSON history for passing runs too.
	AlwaysWriteHistory bool
	// RecoverWithin is the self-recovery deadline after the last fault
	// healed; default 60s.
	RecoverWithin time.Duration
	// Progress receives a line per fault and phase; nil: silent.
	Progress io.Writer
	// Keep leaves the tables in the database.
	Keep bool
}

// WithDefaults returns c with the default in every zero field.
func (c Config) WithDefaults() Config {
	if c.BrokerKind == "" {
		c.BrokerKind = "nats"
	}
	if c.Seed == 0 {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.Seed = uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3]) | 1
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Writers, 3)
	def(&c.Keys, 16)
	def(&c.Relays, 3)
	defd := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defd(&c.Duration, 20*time.Second)
	defd(&c.Lease, 2*time.Second)
	defd(&c.WriterTimeout, 1500*time.Millisecond)
	defd(&c.Pace, 20*time.Millisecond)
	defd(&c.RecoverWithin, 60*time.Second)
	if c.Rollback == 0 {
		c.Rollback = 0.1
	}
	if c.Hold == 0 {
		c.Hold = 0.1
	}
	if c.HistoryDir == "" {
		c.HistoryDir = os.TempDir()
	}
	if c.RelayBinary == "" && c.RelayCommand == nil {
		if exe, err := os.Executable(); err == nil {
			c.RelayBinary = exe
		}
	}
	return c
}

// validate refuses a run WithDefaults could not complete.
func (c Config) validate() error {
	if c.DB == "" {
		return errors.New("torture: Config.DB is required")
	}
	if _, ok := transports[c.BrokerKind]; !ok {
		return fmt.Errorf("torture: unknown broker %q", c.BrokerKind)
	}
	if c.RelayBinary == "" && c.RelayCommand == nil {
		return errors.New("torture: no relay to run: set Config.RelayBinary or RelayCommand (this program's path could not be found)")
	}
	return nil
}

// Result is a finished run.
type Result struct {
	Summary     string
	Seed        uint64
	Store       string
	Report      Report
	Recovered   bool
	RecoveredIn time.Duration
	Final       store.Stats
	Faults      []FaultRecord
	RelayExits  int      // relays that exited by themselves and were restarted
	Failures    []string // empty when the run passed
	HistoryFile string   // the JSON history, when written
	CDCSlot     string   // source=pgcdc or binlog: the slot (binlog: drain) check's outcome
}

// Passed reports whether every check held.
func (r *Result) Passed() bool { return len(r.Failures) == 0 }

// run is the state of one torture run.
type run struct {
	cfg   Config
	kind  string // postgres, mysql, sqlite
	t     tables
	start time.Time
	// faultsFrom is when the first event reached the consumer, after
	// start: the plan's times count from it.
	faultsFrom time.Duration
	st         store.Store
	admin      *sql.DB
	tr         transport
	relays     *relaySet
	brokerP    *faultproxy.Proxy
	dbP        *faultproxy.Proxy // relays ↔ database
	writerP    *faultproxy.Proxy // writers ↔ database
	writers    *writers
	in         *inbox.Inbox
	consDB     *sql.DB
	tmpDir     string // the embedded broker's storage

	delivered atomic.Int64
	n         atomic.Int64
	histErrs  atomic.Int64

	mu     sync.Mutex
	faults []FaultRecord
}

func (r *run) logf(format string, a ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "torture %6.1fs %s: %s\n", time.Since(r.start).Seconds(), r.kind, fmt.Sprintf(format, a...))
	}
}

func (r *run) since() int64 { return time.Since(r.start).Milliseconds() }

// Run performs one torture run: writers, relays, a consumer and the fault
// schedule, then the final drain, the self-recovery check and the checker.
// It returns an error only when the run could not be set up or carried
// out; anomalies are in the Result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, start: time.Now()}
	defer r.cleanup()
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	return r.execute(ctx)
}

func (r *run) setup(ctx context.Context) error {
	cfg := r.cfg
	sdb, kind, err := wire.SQLDB(cfg.DB)
	if err != nil {
		return err
	}
	r.kind = kind
	r.admin = sdb
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	r.t = tables{dialect: kind, outbox: "tt_" + hex.EncodeToString(b)}
	if r.cfg.HoldMax <= 0 {
		r.cfg.HoldMax = 400 * time.Millisecond
		if kind == "sqlite" {
			r.cfg.HoldMax = 100 * time.Millisecond
		}
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.admin.PingContext(octx); err != nil {
		return fmt.Errorf("torture: database %s: %w", wire.Mask(cfg.DB), err)
	}
	if r.st, err = wire.OpenStore(octx, cfg.DB, store.Options{Table: r.t.outbox}); err != nil {
		return err
	}
	if err := r.st.Migrate(octx); err != nil {
		return err
	}
	if err := r.t.create(octx, r.admin, cfg.Keys); err != nil {
		return err
	}
	if cfg.Source != "" && cfg.Source != "pgcdc" && cfg.Source != "binlog" {
		return fmt.Errorf("torture: unknown source %q (poll, pgcdc or binlog)", cfg.Source)
	}
	if cfg.Source == "pgcdc" && kind != "postgres" {
		return fmt.Errorf("torture: the pgcdc source needs a PostgreSQL database, not %s", kind)
	}
	if cfg.Source == "binlog" && kind != "mysql" {
		return fmt.Errorf("torture: the binlog source needs a MariaDB database, not %s", kind)
	}
	if cfg.Source == "pgcdc" {
		if err := r.t.installCDCFence(octx, r.admin, r.t.outbox); err != nil {
			return err
		}
	} else if err := r.t.installFence(octx, r.admin, r.t.outbox); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "outbox-torture-broker-")
	if err != nil {
		return err
	}
	r.tmpDir = dir
	if r.tr, err = transports[cfg.BrokerKind](octx, cfg.Broker, dir); err != nil {
		return err
	}
	if r.brokerP, err = faultproxy.New(r.tr.Target()); err != nil {
		return err
	}
	r.brokerP.SetLatency(cfg.LinkLatency)
	relayDB, writerDB := cfg.DB, cfg.DB
	if kind != "sqlite" {
		target, err := hostPort(cfg.DB, kind)
		if err != nil {
			return err
		}
		if r.dbP, err = faultproxy.New(target); err != nil {
			return err
		}
		if r.writerP, err = faultproxy.New(target); err != nil {
			return err
		}
		relayDB, _ = viaProxy(cfg.DB, r.dbP.Addr())
		writerDB, _ = viaProxy(cfg.DB, r.writerP.Addr())
	}
	wdb, _, err := wire.SQLDB(withAppName(writerDB, kind, r.t.outbox+"-writer"))
	if err != nil {
		return err
	}
	wdb.SetMaxOpenConns(cfg.Writers + 2)
	r.writers = &writers{db: wdb, st: r.st, t: r.t, topic: r.tr.Topic(), keys: cfg.Keys, rollback: cfg.Rollback,
		hold: cfg.Hold, holdMax: r.cfg.HoldMax, timeout: cfg.WriterTimeout, pace: cfg.Pace}
	if r.consDB, _, err = wire.SQLDB(withAppName(cfg.DB, kind, r.t.outbox+"-consumer")); err != nil {
		return err
	}
	if r.in, err = inbox.New(r.consDB, inbox.Config{Table: r.t.inbox()}); err != nil {
		return err
	}
	if err := r.in.Migrate(octx); err != nil {
		return err
	}
	brokerURL := r.tr.RelayURL(r.brokerP.Addr())
	mk := func(owner string) *exec.Cmd {
		args := []string{"--db", withAppName(relayDB, kind, owner), "--table", r.t.outbox, "--broker", brokerURL,
			"--owner", owner, "--lease", cfg.Lease.String(), "--batch", "50", "--poll", "50ms",
			"--backoff", "50ms", "--backoff-max", "1s", "--publish-timeout", "2s", "--max-attempts", "1000000", "--log-level", "warn"}
		if cfg.Source != "" {
			args = append(args, "--source", cfg.Source)
		}
		if cfg.Source == "pgcdc" {
			args = append(args, r.t.cdcArgs()...)
		}
		args = append(args, cfg.RelayArgs...)
		if cfg.RelayCommand != nil {
			return cfg.RelayCommand(args)
		}
		return exec.Command(cfg.RelayBinary, append([]string{"relay"}, args...)...)
	}
	r.relays, err = newRelaySet(r.t.outbox, cfg.Relays, mk, r.logf)
	return err
}

func (r *run) cleanup() {
	if r.relays != nil {
		r.relays.close()
	}
	for _, p := range []*faultproxy.Proxy{r.brokerP, r.dbP, r.writerP} {
		if p != nil {
			p.Close()
		}
	}
	if r.tr != nil {
		r.tr.Close()
	}
	if r.writers != nil {
		r.writers.db.Close()
	}
	if r.consDB != nil {
		r.consDB.Close()
	}
	if r.st != nil {
		r.st.Close()
	}
	if r.admin != nil {
		if !r.cfg.Keep && r.t.outbox != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			switch {
			case r.binlog():
				_, _ = r.admin.ExecContext(ctx, "DROP TABLE IF EXISTS "+r.t.binlogState())
			case r.cdc():
				r.t.dropCDC(ctx, r.admin)
			}
			r.t.drop(ctx, r.admin)
			cancel()
		}
		r.admin.Close()
	}
	if r.tmpDir != "" {
		os.RemoveAll(r.tmpDir)
	}
}

func (r *run) execute(ctx context.Context) (*Result, error) {
	cfg := r.cfg
	res := &Result{Seed: cfg.Seed, Store: r.kind}
	var err error
	plan := cfg.Schedule
	if plan == nil {
		kinds, repeat := cfg.Faults, cfg.Repeat
		switch {
		case kinds == nil && cfg.Soak:
			kinds, repeat = SoakKinds(r.kind, r.tr.Restartable(), cfg.PGRestart), true
		case kinds == nil:
			kinds = ShortKinds(r.kind)
		}
		var use []Kind
		for _, k := range kinds {
			if ok, why := Applicable(k, r.kind, r.tr.Restartable()); ok {
				use = append(use, k)
			} else {
				r.logf("fault %s skipped: %s", k, why)
			}
		}
		plan = Plan(cfg.Seed, use, 2*time.Second, cfg.Duration-4*time.Second,
			Timing{Lease: cfg.Lease, WriterTimeout: cfg.WriterTimeout, Relays: cfg.Relays}, repeat)
	}
	// The writers outlast the last fault by 2 s, so it hits a live workload.
	r.cfg.Duration = max(cfg.Duration, End(plan)+2*time.Second)
	cfg = r.cfg
	r.logf("seed %d, %d relays, %d writers over %d keys for %s; %d faults planned", cfg.Seed, cfg.Relays, cfg.Writers, cfg.Keys, cfg.Duration, len(plan))

	consCtx, cancelConsumer := context.WithCancel(context.WithoutCancel(ctx))
	consDone := make(chan struct{})
	go func() {
		defer close(consDone)
		if err := r.tr.Consume(consCtx, r.handle(consCtx)); err != nil {
			r.logf("consumer: %v", err)
		}
	}()
	stopConsumer := func() {
		cancelConsumer()
		<-consDone
	}
	defer stopConsumer()

	wctx, stopWriters := context.WithCancel(ctx)
	defer stopWriters()
	writersDone := make(chan struct{})
	go func() {
		r.writers.run(wctx, cfg.Writers, cfg.Seed)
		close(writersDone)
	}()
	// The clocks of the writers and of the plan start once the first event
	// has gone through a relay and the broker to the consumer: a fault
	// scheduled at 2 s hits relays that are publishing, not relay
	// processes still starting (which on a busy machine takes seconds).
	r.faultsFrom = r.waitFlowing(ctx, 30*time.Second)
	r.logf("events flowing; the faults' times count from here")
	go func() {
		sleep(wctx, cfg.Duration)
		stopWriters()
	}()
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		r.inject(ctx, plan)
	}()
	<-writersDone
	<-faultsDone
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	healed := r.since() // the last fault's heal; the writers' end when there was none
	if fs := r.faultRecords(); len(fs) > 0 {
		healed = 0
		for _, f := range fs {
			healed = max(healed, f.HealMs)
		}
	}
	r.logf("writers done; waiting for self-recovery")

	// Self-recovery: nothing pending and no expired lease, within the
	// deadline after the last fault healed. The writers go on for 2 s after
	// it, so their last events count in the time.
	var st store.Stats
	for {
		s, err := r.st.Stats(ctx)
		if err == nil {
			st = s
			if s.Pending() == 0 && s.ExpiredLeases == 0 {
				res.Recovered = true
				res.RecoveredIn = time.Duration(max(0, r.since()-healed)) * time.Millisecond
				break
			}
		}
		if r.since()-healed > cfg.RecoverWithin.Milliseconds() {
			res.Failures = append(res.Failures, fmt.Sprintf("not recovered within %s of the last fault healing: %d pending (%d sending, %d retrying), %d expired leases, %d dead (stats error: %v)",
				cfg.RecoverWithin, st.Pending(), st.Sending, st.Retrying, st.ExpiredLeases, st.Dead, err))
			break
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		time.Sleep(100 * time.Millisecond)
	}
	if res.Recovered {
		r.logf("recovered in %s; draining the consumer", res.RecoveredIn)
	}

	// Final drain: the consumer has everything the broker holds.
	drainBy := time.Now().Add(30 * time.Second)
	for {
		before := r.delivered.Load()
		ok, err := r.tr.Drained(ctx)
		if ok && err == nil {
			time.Sleep(300 * time.Millisecond)
			if ok2, _ := r.tr.Drained(ctx); ok2 && r.delivered.Load() == before {
				break
			}
		}
		if time.Now().After(drainBy) {
			res.Failures = append(res.Failures, fmt.Sprintf("the consumer did not drain the broker within 30s (last error: %v)", err))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.cdc() {
		sctx, cancel := context.WithTimeout(ctx, 40*time.Second)
		res.CDCSlot, err = r.slotCheck(sctx)
		cancel()
		if err != nil {
			res.CDCSlot = "NOT-caught-up"
			res.Failures = append(res.Failures, err.Error())
		}
	}
	res.Failures = append(res.Failures, r.relays.close()...)
	stopConsumer()

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	h := History{Lease: cfg.Lease, Faults: r.faultRecords(), StaleProbed: r.kind == "postgres"}
	if h.Ledger, err = r.t.readLedger(rctx, r.admin); err != nil {
		return nil, fmt.Errorf("torture: read the ledger: %w", err)
	}
	if h.Deliveries, err = r.t.readHistory(rctx, r.admin); err != nil {
		return nil, fmt.Errorf("torture: read the history: %w", err)
	}
	if h.Applied, err = r.t.readApplied(rctx, r.admin); err != nil {
		return nil, fmt.Errorf("torture: read the applied events: %w", err)
	}
	if h.Stale, err = r.t.readStale(rctx, r.admin); err != nil {
		return nil, fmt.Errorf("torture: read the fencing probe: %w", err)
	}
	outcomes, werrs := r.writers.snapshot()
	h.Client = outcomes
	if res.Final, err = r.st.Stats(rctx); err != nil {
		return nil, fmt.Errorf("torture: final stats: %w", err)
	}
	rep := Check(h)
	res.Report, res.Faults = rep, h.Faults
	if !rep.Safe() {
		res.Failures = append(res.Failures, "anomalies: "+strings.Join(rep.Problems(), " "))
	}
	if rep.Committed == 0 {
		res.Failures = append(res.Failures, "no transaction committed: the run tested nothing")
	}
	exits, crashes := r.relays.unexpectedExits()
	res.RelayExits = exits
	res.Failures = append(res.Failures, crashes...)
	if res.Final.Dead > 0 {
		res.Failures = append(res.Failures, fmt.Sprintf("%d events went DEAD", res.Final.Dead))
	}
	res.Summary = r.summary(res)
	if !res.Passed() || cfg.AlwaysWriteHistory {
		path, err := r.writeHistory(res, h, werrs)
		if err != nil {
			res.Failures = append(res.Failures, "writing the history: "+err.Error())
		}
		res.HistoryFile = path
	}
	return res, nil
}

// summary is the one line with every figure and the seed.
func (r *run) summary(res *Result) string {
	rep := res.Report
	source := r.cfg.Source
	if source == "" {
		source = "poll"
	}
	stale := "n/a"
	if rep.StaleProbed {
		stale = fmt.Sprint(rep.StaleWrites)
	}
	rec := "NO"
	if res.Recovered {
		rec = res.RecoveredIn.Round(100 * time.Millisecond).String()
	}
	slot := ""
	if res.CDCSlot != "" {
		slot = " cdc_slot=" + res.CDCSlot
	}
	return fmt.Sprintf("torture: store=%s broker=%s source=%s seed=%d duration=%s committed=%d rolled_back=%d unknown=%d (committed %d) deliveries=%d delivered=%d lost=%d phantom=%d order_violations=%d duplicates=%d (near faults %d) redelivered=%d double_applied=%d stale_writes=%s relay_exits=%d faults=%d (%s) recovered_in=%s%s",
		r.kind, r.tr.Name(), source, res.Seed, r.cfg.Duration.Round(100*time.Millisecond), rep.Committed, rep.ClientOutcomes[string(RolledBack)],
		rep.ClientOutcomes[string(Unknown)], rep.UnknownCommits, rep.Deliveries, rep.Delivered, rep.Lost, rep.Phantom,
		rep.OrderViolations, rep.Duplicates, rep.DupsNearFaults, rep.Redelivered, rep.DoubleApplied, stale,
		res.RelayExits, len(res.Faults), faultCounts(res.Faults), rec, slot)
}

// handle records one delivery in the history table and applies it through
// the inbox.
func (r *run) handle(ctx context.Context) func(received) bool {
	return func(m received) bool {
		var p payload
		_ = json.Unmarshal(m.Payload, &p)
		id := m.Msg.EventID
		outcome := "unreadable"
		ok := true
		if m.Err == nil {
			res, err := r.in.Handle(ctx, "torture", m.Msg, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, r.t.rebind("INSERT INTO "+r.t.applied()+" (event_id, agg_id, version) VALUES (?, ?, ?)"), id, p.Agg, p.V)
				return err
			})
			outcome = res.String()
			ok = err == nil
		}
		n := r.n.Add(1)
		for attempt := 0; ; attempt++ {
			_, err := r.consDB.ExecContext(ctx, r.t.rebind("INSERT INTO "+r.t.history()+" (n, event_id, event_key, agg_id, version, hash, stream_seq, num_delivered, outcome, at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
				n, id, m.Msg.Key, p.Agg, p.V, hashOf(m.Payload), int64(m.StreamSeq), int64(m.NumDelivered), outcome, r.since())
			if err == nil || ctx.Err() != nil {
				break
			}
			r.histErrs.Add(1)
			sleep(ctx, time.Duration(min(attempt+1, 20))*50*time.Millisecond)
		}
		r.delivered.Add(1)
		return ok
	}
}

// waitFlowing waits until the consumer has received an event, or up to
// limit (a run whose relays never deliver fails its checks later, with the
// relays' errors), and returns the time since start.
func (r *run) waitFlowing(ctx context.Context, limit time.Duration) time.Duration {
	until := time.Now().Add(limit)
	for r.n.Load() == 0 && time.Now().Before(until) && ctx.Err() == nil {
		sleep(ctx, 20*time.Millisecond)
	}
	return time.Since(r.start)
}

func (r *run) faultRecords() []FaultRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]FaultRecord(nil), r.faults...)
}

// historyFile is the JSON written for a failed run.
type historyFile struct {
	Summary     string            `json:"summary"`
	Failures    []string          `json:"failures"`
	Seed        uint64            `json:"seed"`
	Store       string            `json:"store"`
	Broker      string            `json:"broker"`
	Table       string            `json:"table"`
	Config      map[string]any    `json:"config"`
	Report      Report            `json:"report"`
	Final       store.Stats       `json:"final_stats"`
	WriterErrs  map[string]int    `json:"writer_errors"`
	History     History           `json:"history"`
	ClientSaw   map[string]string `json:"client_saw"`
	RelayOutput map[string]string `json:"relay_output"`
}

func (r *run) writeHistory(res *Result, h History, werrs map[string]int) (string, error) {
	client := make(map[string]string, len(h.Client))
	for k, v := range h.Client {
		client[k] = string(v)
	}
	hf := historyFile{
		Summary: res.Summary, Failures: res.Failures, Seed: res.Seed, Store: r.kind, Broker: r.tr.Name(), Table: r.t.outbox,
		Config: map[string]any{"duration": r.cfg.Duration.String(), "writers": r.cfg.Writers, "keys": r.cfg.Keys, "relays": r.cfg.Relays,
			"lease": r.cfg.Lease.String(), "rollback": r.cfg.Rollback, "hold": r.cfg.Hold, "hold_max": r.cfg.HoldMax.String(), "db": wire.Mask(r.cfg.DB)},
		Report: res.Report, Final: res.Final, WriterErrs: werrs, History: h, ClientSaw: client, RelayOutput: r.relays.logs(),
	}
	if err := os.MkdirAll(r.cfg.HistoryDir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(r.cfg.HistoryDir, fmt.Sprintf("torture-%s-%s-seed%d-%s.json", r.kind, r.tr.Name(), res.Seed, time.Now().Format("20060102-150405")))
	b, err := json.MarshalIndent(hf, "", " ")
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(path, b, 0o644)
}

// hostPort returns the database server's host:port from its URL.
func hostPort(raw, kind string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("torture: cannot find the host in the database URL %s", wire.Mask(raw))
	}
	if u.Port() == "" {
		port := "5432"
		if kind == "mysql" {
			port = "3306"
		}
		return u.Hostname() + ":" + port, nil
	}
	return u.Host, nil
}

// viaProxy returns the URL with its host:port replaced by addr.
func viaProxy(raw, addr string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return raw, err
	}
	u.Host = addr
	return u.String(), nil
}

// withAppName names PostgreSQL sessions (application_name), which is how
// backends are picked for termination and how the fencing probe knows the
// writer of a change.
func withAppName(raw, kind, name string) string {
	if kind != "postgres" {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}
