package binlog

import (
	"context"
	"fmt"
	"time"

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
	rows, err := s.db.QueryContext(ctx, "SHOW BINARY LOGS")
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
