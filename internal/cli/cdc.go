package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outbox-go/outbox/internal/wire"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/source"
	"github.com/outbox-go/outbox/source/pgcdc"
)

// cdcFlags are the flags of the pgcdc source, shared by relay, migrate
// and cdc.
type cdcFlags struct {
	slot, publication, prefix string
	tableLess                 bool
}

func (c *cdcFlags) register(f *flags) {
	f.StringVar(&c.slot, "slot", "", "pgcdc: replication slot (default outbox_<table>)")
	f.StringVar(&c.publication, "publication", "", "pgcdc: publication (default outbox_<table>_pub)")
	f.BoolVar(&c.tableLess, "table-less", false, "pgcdc: stream pg_logical_emit_message records (pgcdc.EnqueueMessage) instead of the table's rows")
	f.StringVar(&c.prefix, "prefix", "", "pgcdc: logical message prefix of the table-less mode (default outbox)")
}

func (c *cdcFlags) config(f *flags) pgcdc.Config {
	return pgcdc.Config{Table: f.table, Schema: f.schema, Slot: c.slot, Publication: c.publication, TableLess: c.tableLess, Prefix: c.prefix}
}

// cdcPool opens a pgx pool on --db, which must be PostgreSQL.
func cdcPool(ctx context.Context, f *flags) (*pgxpool.Pool, error) {
	if !strings.HasPrefix(f.db, "postgres://") && !strings.HasPrefix(f.db, "postgresql://") {
		return nil, fmt.Errorf("%w: the pgcdc source needs a PostgreSQL --db (postgres://…), not %s", wire.ErrUsage, wire.Mask(f.db))
	}
	pool, err := pgxpool.New(ctx, f.db)
	if err != nil {
		return nil, fmt.Errorf("bad database URL: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach %s: %w", wire.Mask(f.db), err)
	}
	return pool, nil
}

// runCDCRelay is `outbox relay --source pgcdc`: the pgcdc source and the
// source delivery loop instead of the polling relay, with the relay's
// delivery flags.
func runCDCRelay(ctx context.Context, f *flags, c cdcFlags, rc relay.Config, brokerURL, listenAddr string, log *slog.Logger) error {
	pool, err := cdcPool(ctx, f)
	if err != nil {
		return stoppedOr(ctx, err)
	}
	defer pool.Close()
	cfg := c.config(f)
	cfg.Owner, cfg.Logger = rc.Owner, log
	if rc.LeaseFor > 0 {
		cfg.LeaseFor = rc.LeaseFor
	}
	src, err := pgcdc.New(pool, cfg)
	if err != nil {
		return fmt.Errorf("%w: %s", wire.ErrUsage, strings.TrimPrefix(err.Error(), "pgcdc: "))
	}
	cfg = src.Config()
	bctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	br, err := wire.OpenBroker(bctx, brokerURL)
	cancel()
	if err != nil {
		return stoppedOr(ctx, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = br.Close(cctx)
	}()
	loop, err := source.New(src, br, source.Config{BatchSize: rc.BatchSize, InFlight: rc.Workers, PublishTimeout: rc.PublishTimeout,
		MaxAttempts: rc.MaxAttempts, BackoffBase: rc.BackoffBase, BackoffMax: rc.BackoffMax, Logger: log})
	if err != nil {
		return fmt.Errorf("%w: %s", wire.ErrUsage, flagNames(strings.TrimPrefix(err.Error(), "source: ")))
	}
	log.Info("outbox relay: starting the pgcdc source", "db", wire.Mask(f.db), "broker", wire.Mask(brokerURL), "table", f.qualifiedTable(),
		"slot", cfg.Slot, "publication", cfg.Publication, "table_less", cfg.TableLess, "owner", cfg.Owner, "lease", cfg.LeaseFor)
	if err := src.Start(ctx); err != nil {
		return stoppedOr(ctx, err)
	}
	defer src.Close()
	if listenAddr != "" {
		stopServing, err := serveCDCMetrics(listenAddr, src, log)
		if err != nil {
			return err
		}
		defer stopServing()
	}
	log.Info("outbox relay: started", "source", "pgcdc", "slot", cfg.Slot, "epoch", src.Epoch())
	runErr := loop.Run(ctx)
	t := loop.Totals()
	log.Info("outbox relay: stopped", "delivered", t.Delivered, "retried", t.Retried, "dead", t.Dead)
	if errors.Is(runErr, source.ErrFenced) {
		return fmt.Errorf("another relay took over slot %s: %w", cfg.Slot, runErr)
	}
	return runErr
}

// serveCDCMetrics serves /metrics with outbox_cdc_lag_bytes.
func serveCDCMetrics(addr string, src *pgcdc.Source, log *slog.Logger) (func(), error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(pgcdc.NewLagCollector(src), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %v (is another process using the port?)", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("outbox relay: metrics server stopped", "error", err.Error())
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

const cdcUsage = `cdc drop-slot --db URL [--table outbox] [--slot NAME] [--table-less] [--force]
       outbox cdc lag --db URL [--table outbox] [--slot NAME]`

// runCDC is `outbox cdc`: the pgcdc source's replication slot.
func runCDC(ctx context.Context, e env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(e.stdout, "Usage: outbox %s\n", cdcUsage)
		if len(args) == 0 {
			return fmt.Errorf("%w: say drop-slot or lag", wire.ErrUsage)
		}
		return nil
	}
	sub, args := args[0], args[1:]
	f := newFlags(e, "cdc "+sub, cdcUsage)
	var c cdcFlags
	c.register(f)
	var force *bool
	switch sub {
	case "drop-slot":
		force = f.Bool("force", false, "drop even though events are undelivered (table mode: a later start polls them; table-less: they are lost)")
	case "lag":
	default:
		return fmt.Errorf("%w: unknown cdc command %q: say drop-slot or lag", wire.ErrUsage, sub)
	}
	if err := f.parse(e, args); err != nil {
		return err
	}
	if len(f.posArgs()) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", wire.ErrUsage, f.posArgs()[0])
	}
	if f.db == "" {
		return fmt.Errorf("%w: no database given: pass --db URL or set OUTBOX_DB", wire.ErrUsage)
	}
	cfg, err := c.config(f).WithDefaults()
	if err != nil {
		return fmt.Errorf("%w: %s", wire.ErrUsage, strings.TrimPrefix(err.Error(), "pgcdc: "))
	}
	pool, err := cdcPool(ctx, f)
	if err != nil {
		return err
	}
	defer pool.Close()
	switch sub {
	case "drop-slot":
		if err := pgcdc.DropSlot(ctx, pool, cfg, *force); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "outbox cdc: slot %s dropped\n", cfg.Slot)
	case "lag":
		lag, err := pgcdc.SlotLag(ctx, pool, cfg.Slot)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "slot %s: lag %d bytes, retained WAL %d bytes, wal_status %s\n", cfg.Slot, lag.Bytes, lag.RetainedBytes, lag.WALStatus)
	}
	return nil
}
