package pgcdc

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Lag reads how far the source's slot is behind the server's WAL.
func (s *Source) Lag(ctx context.Context) (Lag, error) { return SlotLag(ctx, s.pool, s.cfg.Slot) }

// LagCollector exposes a source's slot to Prometheus, read at each scrape:
// outbox_cdc_lag_bytes (pg_current_wal_lsn() - confirmed_flush_lsn) and
// outbox_cdc_retained_wal_bytes (pg_current_wal_lsn() - restart_lsn),
// labelled with the slot. Register it with prometheus.MustRegister.
type LagCollector struct {
	src            *Source
	lag, retained  *prometheus.Desc
	scrapeDeadline time.Duration
}

var _ prometheus.Collector = (*LagCollector)(nil)

// NewLagCollector returns the collector of src.
func NewLagCollector(src *Source) *LagCollector {
	l := prometheus.Labels{"slot": src.cfg.Slot}
	return &LagCollector{
		src:            src,
		lag:            prometheus.NewDesc("outbox_cdc_lag_bytes", "WAL bytes written since the replication slot's confirmed flush position.", nil, l),
		retained:       prometheus.NewDesc("outbox_cdc_retained_wal_bytes", "WAL bytes the server retains for the replication slot.", nil, l),
		scrapeDeadline: 2 * time.Second,
	}
}

// Describe implements prometheus.Collector.
func (c *LagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lag
	ch <- c.retained
}

// Collect implements prometheus.Collector; a slot that cannot be read is
// left out of the scrape.
func (c *LagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.scrapeDeadline)
	defer cancel()
	lag, err := c.src.Lag(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(lag.Bytes))
	ch <- prometheus.MustNewConstMetric(c.retained, prometheus.GaugeValue, float64(lag.RetainedBytes))
}
