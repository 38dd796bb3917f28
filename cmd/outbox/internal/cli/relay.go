package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/telemetry"
)

// stopWithin is the promise to process managers: a graceful stop takes at
// most this long.
const stopWithin = 10 * time.Second

// relayGCPercent is the garbage collector's target in the relay and bench
// commands when GOGC is not set. The relay's live heap is small (the batches
// in flight) and it allocates per event, so at the default of 100 it
// collected constantly: 400 raised the drain rate by about a tenth
// (BENCHMARKS.md, "Where the drain's CPU goes"), for a heap bounded by a
// few times the batches in flight.
const relayGCPercent = 400

// relayMemoryHeadroom is what a relay's Go memory holds beside the
// payloads of --max-inflight-bytes: the runtime, the drivers' buffers,
// the events' other fields, the dispatcher.
const relayMemoryHeadroom = 32 << 20

// limitMemory sets the Go runtime's soft memory limit to the byte budget
// plus relayMemoryHeadroom, unless the operator set GOMEMLIMIT. The budget
// bounds the payloads a relay holds, but at relayGCPercent the heap may
// grow to five times what is live before a collection: draining 64 KiB
// events under the 64 MiB budget, a relay's peak RSS was 353 MiB without
// the limit and 119 MiB with it (BENCHMARKS.md, "Memory and CPU"). With it
// the collector runs sooner as the heap nears the
// limit (never using more than half the CPU for it, as the runtime
// bounds), and the heap stays near what the budget allows.
func limitMemory(budget int64) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(max(budget+relayMemoryHeadroom, minMemoryLimit))
	}
}

// minMemoryLimit keeps a small --max-inflight-bytes from making the
// collector run without pause over what any relay holds anyway.
const minMemoryLimit = 64 << 20

// tuneGC applies relayGCPercent unless the operator set GOGC.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(relayGCPercent)
	}
}

func runRelay(ctx context.Context, e env, args []string) error {
	f := newFlags(e, "relay", "relay --db URL --broker URL [flags]")
	brokerURL := f.String("broker", os.Getenv("OUTBOX_BROKER"), "broker URL (or OUTBOX_BROKER): "+wire.BrokerSchemes+"; "+secretsHint("OUTBOX_BROKER"))
	var cfg relay.Config
	f.intFlag(&cfg.BatchSize, "batch", 500, 1, noMax, "events claimed per batch")
	f.intFlag(&cfg.Workers, "workers", 3, 1, noMax, "batches in flight at once")
	f.sizeFlag(&cfg.MaxInflightBytes, "max-inflight-bytes", relay.DefaultMaxInflightBytes, 1, "payload bytes held at once (claimed, not settled); claims wait past it, and one event larger than the rest still goes; the Go memory limit is this plus 32 MiB (at least 64 MiB) unless GOMEMLIMIT is set")
	f.durationFlag(&cfg.LeaseFor, "lease", 30*time.Second, 100*time.Millisecond, "claim lease; renewed while a batch is in flight")
	f.durationFlag(&cfg.PublishTimeout, "publish-timeout", 10*time.Second, time.Millisecond, "deadline of each publish")
	f.durationFlag(&cfg.PollInterval, "poll", 500*time.Millisecond, time.Millisecond, "poll interval when idle (wake-ups come sooner)")
	var probe time.Duration
	f.durationFlag(&probe, "probe", store.DefaultProbeInterval, 0, "how often to look for commits that sent no notification (plain-SQL producers) while commits arrive; 5 times less often after a second without one; 0: off")
	f.intFlag(&cfg.MaxAttempts, "max-attempts", 25, 1, noMax, "failed attempts before an event goes DEAD")
	f.durationFlag(&cfg.BackoffBase, "backoff", time.Second, time.Millisecond, "first retry delay (doubles, full jitter)")
	f.durationFlag(&cfg.BackoffMax, "backoff-max", 10*time.Minute, time.Millisecond, "largest retry delay (at least --backoff)")
	f.StringVar(&cfg.Owner, "owner", "", "relay name in leases, at most 64 characters (default host-pid-random; a given name gets ~ and 8 random hex digits, one per process)")
	deadKeys := f.String("dead-keys", "hold", "after a DEAD event: hold its key's later events (hold) or let them flow (skip)")
	var keepSent time.Duration
	f.durationFlag(&keepSent, "keep-sent", 0, 0, "keep sent events in the archive table this long (0: delete at once)")
	var logLevel string
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	logFormat := f.String("log-format", "text", "log lines as text (key=value) or json, on stderr")
	metricsAddr := f.String("metrics-addr", "", "serve /metrics, /healthz and /readyz on this address (host:port; a bare :port binds 127.0.0.1); empty: off")
	maxTopics := f.Int("metrics-max-topics", telemetry.DefaultMaxTopics, "how many distinct topics become values of the metrics' topic label; later ones are counted as topic=\"other\"")
	var stallAfter, readyGrace time.Duration
	f.durationFlag(&stallAfter, "stall-after", 5*time.Minute, time.Millisecond, "/readyz fails when the oldest due event is older than this and nothing was delivered for as long")
	f.durationFlag(&readyGrace, "ready-grace", 30*time.Second, time.Millisecond, "/readyz fails when the store or the broker has been failing for longer than this")
	dashAddr := f.String("dashboard-addr", "", "serve the dashboard on this address (host:port; a bare :port binds 127.0.0.1); empty: off")
	dashTokenFile := f.String("dashboard-token-file", "", "file holding the dashboard's token, which enables retry, skip and purge (else "+dashboardTokenEnv+"; neither: read-only)")
	dashHosts := f.String("dashboard-host", "", "host names the dashboard answers besides IP addresses and localhost, comma-separated (the name a reverse proxy uses; * for any)")
	otlpEndpoint := f.String("otlp-endpoint", "", "send traces over OTLP/HTTP to this collector (a base URL, /v1/traces is appended, as for OTEL_EXPORTER_OTLP_ENDPOINT), e.g. http://127.0.0.1:4318; default OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT; neither: tracing off")
	traceSpans := f.String("trace-spans", "wave", "with tracing on: one publish span per publish call, linked to the events' traces (wave, the default: next to free), or a span per sampled event, a child in the producer's trace (event: a few µs of CPU per event); the broker message carries the producer's traceparent either way")
	src := f.String("source", "poll", "where events come from: poll (claim rows), pgcdc (PostgreSQL logical replication) or binlog (the MariaDB binlog)")
	var cdc cdcFlags
	cdc.register(f)
	if err := f.parse(e, args); err != nil {
		return err
	}
	if len(f.posArgs()) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", wire.ErrUsage, f.posArgs()[0])
	}
	if *src != "poll" && *src != "pgcdc" && *src != "binlog" {
		return fmt.Errorf("%w: --source must be poll, pgcdc or binlog, not %q", wire.ErrUsage, *src)
	}
	dashListen, err := loopbackAddr("dashboard-addr", *dashAddr)
	if err != nil {
		return err
	}
	if dashListen == "" && (*dashTokenFile != "" || *dashHosts != "") {
		return fmt.Errorf("%w: --dashboard-token-file and --dashboard-host apply to --dashboard-addr: add --dashboard-addr", wire.ErrUsage)
	}
	for _, h := range splitList(*dashHosts) {
		if strings.ContainsAny(h, " /:") {
			return fmt.Errorf("%w: --dashboard-host %q: give host names without ports or schemes, e.g. outbox.internal", wire.ErrUsage, h)
		}
	}
	var dashToken, tokenWarning string
	if dashListen != "" {
		if dashToken, tokenWarning, err = dashboardToken(*dashTokenFile); err != nil {
			return err
		}
	}
	if *traceSpans != "event" && *traceSpans != "wave" {
		return fmt.Errorf("%w: --trace-spans must be event or wave, not %q", wire.ErrUsage, *traceSpans)
	}
	switch *deadKeys {
	case "hold":
		cfg.DeadKeys = relay.HoldKey
	case "skip":
		cfg.DeadKeys = relay.SkipKey
	default:
		return fmt.Errorf("%w: --dead-keys must be hold or skip, not %q", wire.ErrUsage, *deadKeys)
	}
	if cfg.BackoffMax < cfg.BackoffBase {
		return fmt.Errorf("%w: --backoff-max %s is below --backoff %s: raise --backoff-max or lower --backoff", wire.ErrUsage, cfg.BackoffMax, cfg.BackoffBase)
	}
	if len(cfg.Owner) > 64 {
		return fmt.Errorf("%w: --owner is %d characters long; at most 64", wire.ErrUsage, len(cfg.Owner))
	}
	log, err := newLogger(e.stderr, *logFormat, logLevel, append(connectionArgs(args), *brokerURL, f.db)...)
	if err != nil {
		return err
	}
	// Only a mistake in the URL is refused here: a broker that cannot be
	// reached is waited for below.
	if err := checkBrokerURL(*brokerURL, true); err != nil && errors.Is(err, wire.ErrUsage) {
		return err
	}
	if f.db == "" {
		return wire.WithHint(fmt.Errorf("%w: no database given: pass --db URL or set OUTBOX_DB", wire.ErrUsage), " ("+wire.DBSchemes+")")
	}
	if keepSent > 0 && keepSent < time.Second {
		return fmt.Errorf("%w: --keep-sent %s: keep sent events at least 1s (the archive is purged once a minute), or 0 to delete them at once", wire.ErrUsage, keepSent)
	}
	if *maxTopics < 1 {
		return fmt.Errorf("%w: --metrics-max-topics %d: give at least 1", wire.ErrUsage, *maxTopics)
	}
	listenAddr, err := metricsListenAddr(*metricsAddr)
	if err != nil {
		return err
	}
	if dashListen != "" && dashListen == listenAddr {
		return fmt.Errorf("%w: --dashboard-addr and --metrics-addr are both %s: give them different ports", wire.ErrUsage, dashListen)
	}
	endpoint := tracingEndpoint(*otlpEndpoint)
	if err := checkOTLPEndpoint(*otlpEndpoint); err != nil {
		return err
	}
	cfg.Logger = log
	var metrics *telemetry.Metrics
	if listenAddr != "" {
		metrics = telemetry.NewMetrics(telemetry.MetricsConfig{MaxTopics: *maxTopics})
		cfg.Hooks = append(cfg.Hooks, metrics)
	}
	if endpoint != "" {
		tracing, flush, err := startTracing(ctx, *otlpEndpoint, *brokerURL, *traceSpans == "wave")
		if err != nil {
			return err
		}
		defer flush()
		cfg.Hooks = append(cfg.Hooks, tracing)
	}
	// Every setting is checked before anything is opened: relay.New
	// touches neither its store nor its broker, so stand-ins do here.
	if _, err := relay.New(struct{ driver.Driver }{}, struct{ broker.Broker }{}, cfg); err != nil {
		return fmt.Errorf("%w: %s", wire.ErrUsage, flagNames(strings.TrimPrefix(err.Error(), "relay: ")))
	}
	if path, ok := sqlitePath(f.db); ok && path != ":memory:" {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("SQLite database file %s does not exist: check --db, or create it with `outbox migrate --db %s`", path, wire.Mask(f.db))
		}
	}
	tuneGC()
	limitMemory(cfg.MaxInflightBytes)
	if tokenWarning != "" {
		log.Warn("outbox relay: " + tokenWarning)
	}
	for _, w := range f.commandLineSecrets(map[string]string{"db": f.db, "broker": *brokerURL}) {
		log.Warn("outbox relay: " + w)
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	serve := cdcServe{listenAddr: listenAddr, metrics: metrics, stallAfter: stallAfter, readyGrace: readyGrace,
		dashListen: dashListen, dashToken: dashToken, dashHosts: splitList(*dashHosts)}
	switch *src {
	case "pgcdc":
		return runCDCRelay(ctx, f, cdc, cfg, *brokerURL, serve, log)
	case "binlog":
		return runBinlogRelay(ctx, f, cfg, *brokerURL, serve, log)
	}
	// The endpoints come first, so that a relay waiting for its database
	// or broker is seen to be alive and not ready, and why.
	var state *telemetry.State
	if listenAddr != "" {
		state = telemetry.NewState(nil, nil)
		stopServing, err := serveTelemetry(listenAddr, state, metrics, stallAfter, readyGrace, log)
		if err != nil {
			return err
		}
		defer stopServing()
	}
	opts := f.options()
	opts.KeepSent = keepSent > 0
	opts.ProbeInterval = probe
	if probe == 0 {
		opts.ProbeInterval = -1 // off: such commits wait for the next --poll
	}
	st, err := openStoreRetrying(ctx, f, opts, retrier{what: "database", component: telemetry.ComponentStore, log: log, state: state})
	if err != nil {
		return stoppedOr(ctx, err)
	}
	defer st.Close()
	if state != nil {
		state.SetStore(st)
	}
	br, err := openBrokerRetrying(ctx, *brokerURL, retrier{what: "broker", component: telemetry.ComponentBroker, log: log, state: state})
	if err != nil {
		return stoppedOr(ctx, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = br.Close(cctx)
	}()
	r, err := relay.New(st, br, cfg)
	if err != nil {
		return fmt.Errorf("%w: %s", wire.ErrUsage, flagNames(strings.TrimPrefix(err.Error(), "relay: ")))
	}
	if state != nil {
		state.SetRelay(r)
	}
	if dashListen != "" {
		d, err := newDashboard(st, r, dashToken, splitList(*dashHosts), "Actions are off: restart `outbox relay` with --dashboard-token-file FILE (a file holding a secret token) or "+dashboardTokenEnv+" set, then enter the token here.", log)
		if err != nil {
			return fmt.Errorf("%w: %v", wire.ErrUsage, err)
		}
		defer d.Close()
		stopDash, bound, err := serveDashboard(dashListen, d, log)
		if err != nil {
			return err
		}
		defer stopDash()
		log.Info("outbox relay: dashboard at http://"+bound+"/", "actions", dashToken != "")
	}
	log.Info("outbox relay: started", "owner", r.Owner(), "db", wire.Mask(f.db), "broker", wire.Mask(*brokerURL),
		"table", f.qualifiedTable(), "batch", cfg.BatchSize, "workers", cfg.Workers, "max_inflight_bytes", formatBytes(cfg.MaxInflightBytes), "lease", cfg.LeaseFor,
		"publish_timeout", cfg.PublishTimeout, "poll", cfg.PollInterval, "probe", probe, "max_attempts", cfg.MaxAttempts,
		"backoff", cfg.BackoffBase, "backoff_max", cfg.BackoffMax, "dead_keys", *deadKeys, "keep_sent", keepSent,
		"metrics_addr", listenAddr, "tracing", wire.Mask(endpoint))
	if keepSent > 0 {
		go purgeSent(ctx, st, keepSent, log)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	<-ctx.Done()
	log.Info("outbox relay: stopping", "within", stopWithin)
	select {
	case <-done:
	case <-time.After(stopWithin - time.Second):
		log.Warn("outbox relay: in-flight work did not settle in time; its leases will expire and it will be redelivered")
	}
	t := r.Totals()
	log.Info("outbox relay: stopped", "delivered", t.Delivered.Load(), "retried", t.Retried.Load(), "dead", t.Dead.Load())
	return nil
}

// relayFlags maps relay.Config's field names, which relay.New's errors
// use, to the flags that set them.
var relayFlags = strings.NewReplacer(
	"BatchSize", "--batch", "Workers", "--workers", "MaxInflightBytes", "--max-inflight-bytes", "LeaseFor", "--lease", "PublishTimeout", "--publish-timeout",
	"PollInterval", "--poll", "MaxAttempts", "--max-attempts", "BackoffBase", "--backoff", "BackoffMax", "--backoff-max",
	"Owner", "--owner", "DeadKeys", "--dead-keys",
)

// flagNames rewrites a relay.Config error in the CLI's terms.
func flagNames(msg string) string { return relayFlags.Replace(msg) }

// purgeSent applies the --keep-sent retention every minute.
func purgeSent(ctx context.Context, st store.Store, keep time.Duration, log *slog.Logger) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		n, err := st.Purge(ctx, store.PurgeRequest{Status: outbox.StatusSent, OlderThan: keep})
		if err != nil && ctx.Err() == nil {
			log.Warn("outbox relay: purging sent events failed", "error", err.Error())
		} else if n > 0 {
			log.Info("outbox relay: purged sent events", "count", n, "older_than", keep)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// stoppedOr returns nil when err came from a SIGINT/SIGTERM during start-up
// (a process manager stopping a relay that was still connecting is a
// graceful stop, not a failure), and err otherwise.
func stoppedOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
