package telemetry

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
)

// State reads the relay's health and the store's backlog at scrape time,
// for the gauges and for readiness. Its backlog query is reused for up to
// a second, so several scrapers and probes cost one.
type State struct {
	relay   *relay.Relay
	backlog store.BacklogReader // nil when the store has none

	mu      sync.Mutex
	at      time.Time
	last    store.Backlog
	lastErr error

	pending, oldest, dead, backlogUp, inFlight, lastDelivery, storeUp, brokerUp *prometheus.Desc
}

var _ prometheus.Collector = (*State)(nil)

// NewState watches r and, when st is a store.BacklogReader, its backlog.
func NewState(r *relay.Relay, st store.Store) *State {
	s := &State{relay: r}
	if br, ok := st.(store.BacklogReader); ok {
		s.backlog = br
	}
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	s.pending = d("outbox_pending_events", "Events waiting, estimated by the id span of pending rows (exact without gaps).")
	s.oldest = d("outbox_oldest_pending_age_seconds", "Age of the first waiting event (database clock); 0 when none waits.")
	s.dead = d("outbox_dead_events", "DEAD events, waiting for an operator.")
	s.backlogUp = d("outbox_backlog_up", "1 when the backlog gauges could be read at this scrape, 0 when the store did not answer.")
	s.inFlight = d("outbox_in_flight_events", "Events this relay claimed and has not settled yet.")
	s.lastDelivery = d("outbox_last_delivery_timestamp_seconds", "Unix time of this relay's last delivery; 0 before the first.")
	s.storeUp = d("outbox_store_up", "1 while the store answers, 0 while it fails as a whole.")
	s.brokerUp = d("outbox_broker_up", "1 while the broker confirms, 0 while it fails as a whole.")
	return s
}

// Backlog returns the store's backlog, queried at most once a second.
func (s *State) Backlog(ctx context.Context) (store.Backlog, bool, error) {
	if s.backlog == nil {
		return store.Backlog{}, false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.at) < time.Second {
		return s.last, true, s.lastErr
	}
	// Not the caller's cancellation: the result is shared with the
	// scrapes and probes of the next second.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	s.last, s.lastErr = s.backlog.Backlog(ctx)
	s.at = time.Now()
	return s.last, true, s.lastErr
}

// Describe implements prometheus.Collector.
func (s *State) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.pending, s.oldest, s.dead, s.backlogUp, s.inFlight, s.lastDelivery, s.storeUp, s.brokerUp} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *State) Collect(ch chan<- prometheus.Metric) {
	h := s.relay.Health()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	// A store that does not answer leaves the backlog gauges out of this
	// scrape (outbox_backlog_up 0) rather than failing the whole scrape:
	// during an outage outbox_store_up 0 is the one metric that matters.
	if b, ok, err := s.Backlog(context.Background()); ok {
		if err != nil {
			gauge(s.backlogUp, 0)
		} else {
			gauge(s.backlogUp, 1)
			gauge(s.pending, float64(b.Pending))
			gauge(s.oldest, b.OldestPendingAge.Seconds())
			gauge(s.dead, float64(b.Dead))
		}
	}
	gauge(s.inFlight, float64(h.InFlight))
	last := 0.0
	if !h.LastDelivered.IsZero() {
		last = float64(h.LastDelivered.UnixNano()) / 1e9
	}
	gauge(s.lastDelivery, last)
	gauge(s.storeUp, up(h.StoreError))
	gauge(s.brokerUp, up(h.BrokerError))
}

func up(failure string) float64 {
	if failure != "" {
		return 0
	}
	return 1
}
