package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/source"
	"github.com/outbox-go/outbox/source/binlog"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/mysqlstore"
	"github.com/outbox-go/outbox/telemetry"
)

// runBinlogRelay is `outbox relay --source binlog`: the MariaDB binlog
// source read by the relay (relay.NewSource), with the relay's delivery
// flags, hooks, health endpoints and dashboard, as for pgcdc.
func runBinlogRelay(ctx context.Context, f *flags, rc relay.Config, brokerURL string, sv cdcServe, log *slog.Logger) error {
	if !strings.HasPrefix(f.db, "mysql://") && !strings.HasPrefix(f.db, "mariadb://") {
		return fmt.Errorf("%w: the binlog source needs a MariaDB --db (mysql://…), not %s", wire.ErrUsage, wire.Mask(f.db))
	}
	dsn, err := mysqlstore.DSN(f.db)
	if err != nil {
		return fmt.Errorf("%w: %v", wire.ErrUsage, err)
	}
	conn, err := mysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("%w: bad database URL: %v", wire.ErrUsage, err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return fmt.Errorf("%w: bad database URL: %v", wire.ErrUsage, err)
	}
	defer db.Close()
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	err = db.PingContext(pctx)
	cancel()
	if err != nil {
		return stoppedOr(ctx, fmt.Errorf("cannot reach %s: %w", wire.Mask(f.db), err))
	}
	cfg := binlog.Config{Table: f.table, Schema: f.schema, Owner: rc.Owner, Logger: log}
	if rc.LeaseFor > 0 {
		cfg.LeaseFor = rc.LeaseFor
	}
	src, err := binlog.New(db, conn, cfg)
	if err != nil {
		return fmt.Errorf("%w: %s", wire.ErrUsage, strings.TrimPrefix(err.Error(), "binlog: "))
	}
	cfg = src.Config()
	st, err := mysqlstore.New(db, mysqlstore.Config{Options: store.Options{Table: cfg.Table, Schema: cfg.Schema}})
	if err != nil {
		return fmt.Errorf("%w: %s", wire.ErrUsage, strings.TrimPrefix(err.Error(), "mysqlstore: "))
	}
	defer st.Close()
	var state *telemetry.State
	if sv.listenAddr != "" {
		state = telemetry.NewState(nil, nil)
		stopServing, err := serveTelemetry(sv.listenAddr, state, sv.metrics, sv.stallAfter, sv.readyGrace, log, binlog.NewLagCollector(src))
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
	log.Info("outbox relay: starting the binlog source", "db", wire.Mask(f.db), "broker", wire.Mask(brokerURL), "table", f.qualifiedTable(),
		"owner", cfg.Owner, "lease", cfg.LeaseFor)
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
	log.Info("outbox relay: started", "source", "binlog", "table", cfg.Table, "epoch", src.Epoch(), "metrics_addr", sv.listenAddr)
	runErr := r.Run(ctx)
	t := r.Totals()
	log.Info("outbox relay: stopped", "delivered", t.Delivered.Load(), "retried", t.Retried.Load(), "dead", t.Dead.Load(), "fallbacks", src.Fallbacks())
	if errors.Is(runErr, source.ErrFenced) {
		return fmt.Errorf("another relay took over the binlog source of %s: %w", cfg.Table, runErr)
	}
	return runErr
}

// binlogLag is `outbox cdc lag` on MariaDB: the binlog source's saved
// resume position and the binlog written since.
func binlogLag(ctx context.Context, e env, f *flags) error {
	dsn, err := mysqlstore.DSN(f.db)
	if err != nil {
		return fmt.Errorf("%w: %v", wire.ErrUsage, err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return fmt.Errorf("%w: bad database URL: %v", wire.ErrUsage, err)
	}
	defer db.Close()
	saved, err := binlog.SavedLag(ctx, db, binlog.Config{Table: f.table, Schema: f.schema})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "binlog source of %s: saved position %s:%d (GTID %s), lag %d bytes\n", f.qualifiedTable(), saved.File, saved.Pos, saved.GTID, saved.LagBytes)
	return nil
}
