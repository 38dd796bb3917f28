package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
)

// Lag is how many binlog bytes the server wrote after the saved resume
// position: what a restart would read again, and what the server must
// keep (binlog_expire_logs_seconds permitting). Files purged past the
// saved position count as nothing: the next start reads the table.
func (s *Source) Lag(ctx context.Context) (int64, error) {
	s.mu.Lock()
	saved := s.saved
	s.mu.Unlock()
	return lagSince(ctx, s.db, saved)
}

// Saved is a table's saved resume position, the binlog written since, and
// the streaming lease.
type Saved struct {
	File     string // "" while no position is saved yet (the first start reads the table)
	Pos      uint32
	GTID     string
	LagBytes int64
	Owner    string    // the process that holds or last held the lease ("" when none ever did)
	Epoch    int64     // the lease's fencing epoch
	Until    time.Time // the lease's expiry (zero when none was taken)
	Live     bool      // the lease has not expired: Owner streams
}

// ErrNoState: the table has no binlog source state (no `outbox relay
// --source binlog` ever started on it).
var ErrNoState = errors.New("binlog: no binlog source state")

// SavedLag reads the resume position saved for cfg's table (by any
// process; nothing needs to run), the binlog bytes written since, and who
// holds the lease. An error wrapping ErrNoState when no binlog source ever
// started on the table.
func SavedLag(ctx context.Context, db *sql.DB, cfg Config) (Saved, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return Saved{}, err
	}
	state := "`" + cfg.Table + "_binlog`"
	if cfg.Schema != "" {
		state = "`" + cfg.Schema + "`." + state
	}
	var sv Saved
	var pos int64
	var until sql.NullTime
	var live sql.NullBool
	err = db.QueryRowContext(ctx, "SELECT file, pos, gtid, owner, epoch, lease_until, lease_until > NOW(6) FROM "+state+" WHERE stream = ?", stateRow).
		Scan(&sv.File, &pos, &sv.GTID, &sv.Owner, &sv.Epoch, &until, &live)
	var me *mysql.MySQLError
	if errors.Is(err, sql.ErrNoRows) || errors.As(err, &me) && me.Number == 1146 {
		return Saved{}, fmt.Errorf("%w in %s: start `outbox relay --source binlog` first", ErrNoState, state)
	}
	if err != nil {
		return Saved{}, fmt.Errorf("binlog: reading %s: %w", state, err)
	}
	sv.Pos = uint32(pos)
	sv.Until, sv.Live = until.Time, live.Bool
	if sv.File == "" {
		return sv, nil
	}
	sv.LagBytes, err = lagSince(ctx, db, resume{File: sv.File, Pos: sv.Pos, GTID: sv.GTID})
	return sv, err
}

func lagSince(ctx context.Context, db *sql.DB, saved resume) (int64, error) {
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return 0, fmt.Errorf("binlog: reading the binary logs: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	var lag int64
	for rows.Next() {
		var name string
		var size int64
		dest := []any{&name, &size}
		for range cols[2:] {
			dest = append(dest, new(any))
		}
		if err := rows.Scan(dest...); err != nil {
			return 0, err
		}
		switch {
		case name == saved.File:
			lag += max(size-int64(saved.Pos), 0)
		case name > saved.File:
			lag += size
		}
	}
	return lag, rows.Err()
}

// LagCollector exposes a source's lag to Prometheus, read at each scrape:
// outbox_cdc_lag_bytes, labelled with the table.
type LagCollector struct {
	src *Source
	lag *prometheus.Desc
}

var _ prometheus.Collector = (*LagCollector)(nil)

// NewLagCollector returns the collector of src.
func NewLagCollector(src *Source) *LagCollector {
	return &LagCollector{src: src, lag: prometheus.NewDesc("outbox_cdc_lag_bytes",
		"Binlog bytes written since the binlog source's saved resume position.", nil, prometheus.Labels{"table": src.cfg.Table})}
}

// Describe implements prometheus.Collector.
func (c *LagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.lag }

// Collect implements prometheus.Collector; a lag that cannot be read is
// left out of the scrape.
func (c *LagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	lag, err := c.src.Lag(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(lag))
}
