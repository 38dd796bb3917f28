package telemetry

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-go/outbox/internal/redact"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
)

// State reads the relay's health and the store's backlog at scrape time,
// for the gauges and for readiness. Its backlog query is reused for up to
// a second, so several scrapers and probes cost one.
//
// A process that serves its metrics before it has reached its database and
// broker (`outbox relay` does, so that it never crash-loops on an outage)
// creates the State with nil, reports each connection attempt with
// Connecting, and attaches the store and the relay as they come: until the
// relay is attached, /readyz answers 503 naming what it waits for.
type State struct {
	mu         sync.Mutex
	relay      *relay.Relay
	backlog    store.BacklogReader            // nil when the store has none
	connecting [2]connecting                  // store, broker: before the relay runs
	ready      func(context.Context) []string // the Handler's readiness check; nil before Handler

	bmu     sync.Mutex // the backlog cache
	at      time.Time
	last    store.Backlog
	lastErr error
	failing time.Time // since when the backlog query fails; zero while it answers

	pending, oldest, dead, backlogUp, inFlight, inflightBytes, lastDelivery, storeUp, brokerUp, readyDesc, shardsHeld *prometheus.Desc
}

// connecting is one start-up connection: done once it succeeded, else
// the last failure and since when it fails.
type connecting struct {
	done  bool
	err   string
	since time.Time
}

// The components a relay process connects to before its relay runs.
const (
	ComponentStore  = "store"
	ComponentBroker = "broker"
)

var _ prometheus.Collector = (*State)(nil)

// NewState watches r and, when st is a store.BacklogReader, its backlog.
// Either may be nil, to be attached later with SetStore and SetRelay.
func NewState(r *relay.Relay, st store.Store) *State {
	s := &State{}
	s.SetStore(st)
	s.SetRelay(r)
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	s.pending = d("outbox_pending_events", "Events waiting, estimated by the id span of pending rows (exact without gaps).")
	s.oldest = d("outbox_oldest_pending_age_seconds", "Age of the oldest due event (in flight, or one a claim may take now; not one held by its next attempt or behind a DEAD event of its key) among the first 1,000 waiting (database clock); 0 when none of them is due.")
	s.dead = d("outbox_dead_events", "DEAD events, waiting for an operator (counted up to "+strconv.Itoa(store.DeadCap)+").")
	s.backlogUp = d("outbox_backlog_up", "1 when the backlog gauges could be read at this scrape, 0 when the store did not answer.")
	s.inFlight = d("outbox_in_flight_events", "Events this relay claimed and has not settled yet.")
	s.inflightBytes = d("outbox_inflight_bytes", "Payload bytes of the events this relay claimed and has not settled yet (bounded by --max-inflight-bytes).")
	s.lastDelivery = d("outbox_last_delivery_timestamp_seconds", "Unix time of this relay's last delivery; 0 before the first.")
	s.storeUp = d("outbox_store_up", "1 while the store answers, 0 while it fails as a whole (or was never reached).")
	s.brokerUp = d("outbox_broker_up", "1 while the broker confirms, 0 while it fails as a whole (or was never reached).")
	s.shardsHeld = d("outbox_shards_held", "Shards of the outbox table this relay holds; absent for a relay over a log source (pgcdc).")
	s.readyDesc = d("outbox_ready", "1 while /readyz answers 200, 0 while it answers 503 (starting, store or broker failing past the grace, delivery stalled).")
	return s
}

// setReadiness gives the State the Handler's readiness check, for the
// outbox_ready gauge.
func (s *State) setReadiness(f func(context.Context) []string) {
	s.mu.Lock()
	s.ready = f
	s.mu.Unlock()
}

// SetStore attaches the store whose backlog the gauges and /readyz read;
// nil detaches it.
func (s *State) SetStore(st store.Store) {
	br, _ := st.(store.BacklogReader)
	s.mu.Lock()
	s.backlog = br
	if st != nil {
		s.connecting[0] = connecting{done: true}
	}
	s.mu.Unlock()
}

// SetRelay attaches the running relay: from then on its health, not the
// start-up state, says whether the store and broker are up.
func (s *State) SetRelay(r *relay.Relay) {
	s.mu.Lock()
	s.relay = r
	s.mu.Unlock()
}

// Connecting records a start-up attempt to reach component (ComponentStore
// or ComponentBroker): err is why it failed, nil when it succeeded.
func (s *State) Connecting(component string, err error) {
	i := 0
	if component == ComponentBroker {
		i = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &s.connecting[i]
	switch {
	case err == nil:
		*c = connecting{done: true}
	case c.err == "":
		*c = connecting{err: redact.Text(err.Error()), since: time.Now()}
	default:
		c.err = redact.Text(err.Error())
	}
}

// snapshot returns the attached relay (nil while starting), the backlog
// reader and the start-up state.
func (s *State) snapshot() (*relay.Relay, store.BacklogReader, [2]connecting) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.relay, s.backlog, s.connecting
}

// startingReasons says what a process whose relay is not running yet
// waits for.
func (s *State) startingReasons(now time.Time) []string {
	_, _, conn := s.snapshot()
	var out []string
	for i, name := range [2]string{"database", "broker"} {
		c := conn[i]
		switch {
		case c.done:
		case c.err != "":
			out = append(out, fmt.Sprintf("starting: the %s is unreachable (for %s, retrying with backoff): %s", name, now.Sub(c.since).Round(time.Second), c.err))
		default:
			out = append(out, "starting: connecting to the "+name)
		}
		if !c.done {
			break // the broker is tried once the store answered
		}
	}
	if len(out) == 0 {
		out = append(out, "starting: the relay is not running yet")
	}
	return out
}

// Backlog returns the store's backlog, queried at most once a second; ok
// is false while no store with a backlog is attached.
func (s *State) Backlog(ctx context.Context) (b store.Backlog, ok bool, err error) {
	_, br, _ := s.snapshot()
	if br == nil {
		return store.Backlog{}, false, nil
	}
	s.bmu.Lock()
	defer s.bmu.Unlock()
	if time.Since(s.at) < time.Second {
		return s.last, true, s.lastErr
	}
	// Not the caller's cancellation: the result is shared with the
	// scrapes and probes of the next second.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	start := time.Now()
	s.last, s.lastErr = br.Backlog(ctx)
	s.at = time.Now()
	switch {
	case s.lastErr == nil:
		s.failing = time.Time{}
	case s.failing.IsZero():
		s.failing = start
	}
	return s.last, true, s.lastErr
}

// backlogFailingSince is when the backlog query started failing, zero
// while it answers.
func (s *State) backlogFailingSince() time.Time {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	return s.failing
}

// Describe implements prometheus.Collector.
func (s *State) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.pending, s.oldest, s.dead, s.backlogUp, s.inFlight, s.inflightBytes, s.lastDelivery, s.storeUp, s.brokerUp, s.readyDesc, s.shardsHeld} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *State) Collect(ch chan<- prometheus.Metric) {
	r, _, conn := s.snapshot()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	s.mu.Lock()
	ready := s.ready
	s.mu.Unlock()
	if ready != nil {
		gauge(s.readyDesc, bool01(len(ready(context.Background())) == 0))
	}
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
	if r == nil { // starting: up once reached
		gauge(s.inFlight, 0)
		gauge(s.inflightBytes, 0)
		gauge(s.lastDelivery, 0)
		gauge(s.storeUp, bool01(conn[0].done))
		gauge(s.brokerUp, bool01(conn[1].done))
		return
	}
	h := r.Health()
	gauge(s.inFlight, float64(h.InFlight))
	gauge(s.inflightBytes, float64(h.InflightBytes))
	last := 0.0
	if !h.LastDelivered.IsZero() {
		last = float64(h.LastDelivered.UnixNano()) / 1e9
	}
	gauge(s.lastDelivery, last)
	gauge(s.storeUp, up(h.StoreError))
	gauge(s.brokerUp, up(h.BrokerError))
	if h.Owned {
		gauge(s.shardsHeld, float64(h.ShardsHeld))
	}
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func up(failure string) float64 {
	if failure != "" {
		return 0
	}
	return 1
}
