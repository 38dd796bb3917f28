package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/source"
	"github.com/outbox-go/outbox/source/pgcdc"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/pgstore"
	"github.com/outbox-go/outbox/telemetry"
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
		return nil, fmt.Errorf("%w: bad database URL: %w", wire.ErrUsage, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach %s: %w", wire.Mask(f.db), err)
	}
	return pool, nil
}

// cdcServe is what runCDCRelay serves besides delivering: the relay's
// endpoints and dashboard, as for the polling relay.
type cdcServe struct {
	listenAddr             string // --metrics-addr (resolved); empty: off
	metrics                *telemetry.Metrics
	stallAfter, readyGrace time.Duration
	dashListen, dashToken  string // --dashboard-addr (resolved); empty: off
	dashHosts              []string
}

// runCDCRelay is `outbox relay --source pgcdc`: the pgcdc source read by
// the relay (relay.NewSource), with the relay's delivery flags, hooks
// (metrics, tracing), health endpoints and dashboard.
func runCDCRelay(ctx context.Context, f *flags, c cdcFlags, rc relay.Config, brokerURL string, sv cdcServe, log *slog.Logger) error {
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
	// The store over the table operators look at (the outbox table, or
	// the table-less mode's buried events): the backlog gauges, /readyz's
	// stall check and the dashboard read it.
	table := cfg.Table
	if cfg.TableLess {
		table += "_dead"
	}
	st, err := pgstore.New(pool, pgstore.Config{Options: store.Options{Table: table, Schema: cfg.Schema}, DisableNotify: true})
	if err != nil {
		return fmt.Errorf("%w: %s", wire.ErrUsage, strings.TrimPrefix(err.Error(), "pgstore: "))
	}
	defer st.Close()
	var state *telemetry.State
	if sv.listenAddr != "" {
		state = telemetry.NewState(nil, nil)
		stopServing, err := serveTelemetry(sv.listenAddr, state, sv.metrics, sv.stallAfter, sv.readyGrace, log, pgcdc.NewLagCollector(src))
		if err != nil {
			return err
		}
		defer stopServing()
	}
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
	if state != nil {
		state.Connecting(telemetry.ComponentBroker, nil)
	}
	r, err := relay.NewSource(src, br, rc)
	if err != nil {
		return fmt.Errorf("%w: %s", wire.ErrUsage, flagNames(strings.TrimPrefix(err.Error(), "relay: ")))
	}
	log.Info("outbox relay: starting the pgcdc source", "db", wire.Mask(f.db), "broker", wire.Mask(brokerURL), "table", f.qualifiedTable(),
		"slot", cfg.Slot, "publication", cfg.Publication, "table_less", cfg.TableLess, "owner", cfg.Owner, "lease", cfg.LeaseFor)
	if err := src.Start(ctx); err != nil {
		return stoppedOr(ctx, err)
	}
	defer src.Close()
	if state != nil {
		state.SetStore(st)
		state.SetRelay(r)
	}
	if sv.dashListen != "" {
		d, err := newDashboard(st, r, sv.dashToken, sv.dashHosts, "Actions are off: restart `outbox relay` with --dashboard-token-file FILE (a file holding a secret token) or "+dashboardTokenEnv+" set, then enter the token here.", log)
		if err != nil {
			return fmt.Errorf("%w: %v", wire.ErrUsage, err)
		}
		defer d.Close()
		stopDash, bound, err := serveDashboard(sv.dashListen, d, log)
		if err != nil {
			return err
		}
		defer stopDash()
		log.Info("outbox relay: dashboard at http://"+bound+"/", "actions", sv.dashToken != "")
	}
	log.Info("outbox relay: started", "source", "pgcdc", "slot", cfg.Slot, "epoch", src.Epoch(), "metrics_addr", sv.listenAddr)
	runErr := r.Run(ctx)
	t := r.Totals()
	log.Info("outbox relay: stopped", "delivered", t.Delivered.Load(), "retried", t.Retried.Load(), "dead", t.Dead.Load())
	if errors.Is(runErr, source.ErrFenced) {
		return fmt.Errorf("another relay took over slot %s: %w", cfg.Slot, runErr)
	}
	return runErr
}

const cdcUsage = `cdc drop-slot --db URL [--table outbox] [--slot NAME] [--table-less] [--force]
       outbox cdc lag --db URL [--table outbox] [--slot NAME]   (a mysql:// URL: the binlog source's saved position)`

// runCDC is `outbox cdc`: the pgcdc source's replication slot, or, for
// lag on MariaDB, the binlog source's saved position.
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
	cfg := c.config(f).WithDefaults()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %s", wire.ErrUsage, strings.TrimPrefix(err.Error(), "pgcdc: "))
	}
	if sub == "lag" && (strings.HasPrefix(f.db, "mysql://") || strings.HasPrefix(f.db, "mariadb://")) {
		return binlogLag(ctx, e, f)
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
