package telemetry

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-go/outbox/relay"
)

// Metrics counts what a relay does. Pass it in relay.Config.Hooks and
// register it (it is a prometheus.Collector) with your registry.
type Metrics struct {
	published *prometheus.CounterVec
	failed    *prometheus.CounterVec
	settled   *prometheus.CounterVec
	latency   prometheus.Histogram
	publish   prometheus.Histogram
	batch     prometheus.Histogram
	claimErrs prometheus.Counter
	leaseLost prometheus.Counter
	overflow  prometheus.Counter

	// topics are the topic label values given out, at most maxTopics;
	// the events of any other topic are counted under OtherTopic.
	maxTopics int
	tmu       sync.RWMutex
	topics    map[string]struct{}
}

// MetricsConfig configures NewMetrics.
type MetricsConfig struct {
	// MaxTopics is how many distinct topics become values of the topic
	// label; the events of later ones are counted under OtherTopic (and
	// in outbox_metrics_topics_overflow_total), so a producer writing an
	// id into its topics cannot grow the relay's series without bound.
	// Default (0 or less) DefaultMaxTopics.
	MaxTopics int
}

// DefaultMaxTopics is MetricsConfig.MaxTopics's default.
const DefaultMaxTopics = 100

// OtherTopic is the topic label value of the events whose topic came
// after MetricsConfig.MaxTopics others.
const OtherTopic = "other"

// WithDefaults returns c with its zero values replaced by the defaults.
func (c MetricsConfig) WithDefaults() MetricsConfig {
	if c.MaxTopics <= 0 {
		c.MaxTopics = DefaultMaxTopics
	}
	return c
}

var (
	_ relay.HookClaim      = (*Metrics)(nil)
	_ relay.HookPublishEnd = (*Metrics)(nil)
	_ relay.HookSettle     = (*Metrics)(nil)
	_ prometheus.Collector = (*Metrics)(nil)
)

// NewMetrics returns the relay's counters and histograms, unregistered.
func NewMetrics(c MetricsConfig) *Metrics {
	c = c.WithDefaults()
	return &Metrics{
		maxTopics: c.MaxTopics,
		topics:    make(map[string]struct{}, c.MaxTopics),
		overflow: prometheus.NewCounter(prometheus.CounterOpts{Name: "outbox_metrics_topics_overflow_total",
			Help: "Events counted under topic=\"other\": their topic came after MetricsConfig.MaxTopics (--metrics-max-topics) others."}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outbox_events_published_total", Help: "Events the broker confirmed."}, []string{"topic"}),
		failed:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outbox_publish_failures_total", Help: "Events the broker did not confirm, by kind: transient (retried), permanent (DEAD), unavailable (released, no attempt counted)."}, []string{"topic", "kind"}),
		settled:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outbox_events_settled_total", Help: "Outcomes written back to the store: delivered, retried, dead, released."}, []string{"outcome"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "outbox_delivery_latency_seconds", Help: "Commit (database clock) to broker confirmation (relay clock).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}}),
		publish: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "outbox_publish_duration_seconds", Help: "Duration of one publish call (one wave of a batch).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 10}}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "outbox_claim_batch_events", Help: "Events per claim, empty claims included.",
			Buckets: []float64{0, 1, 10, 50, 100, 250, 500, 1000, 2500, 5000}}),
		claimErrs: prometheus.NewCounter(prometheus.CounterOpts{Name: "outbox_claim_errors_total", Help: "Claims the store failed."}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "outbox_lease_lost_total", Help: "Batches whose lease was lost while in flight (another relay may redeliver them)."}),
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.published, m.failed, m.settled, m.latency, m.publish, m.batch, m.claimErrs, m.leaseLost, m.overflow}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// OnClaim implements relay.HookClaim.
func (m *Metrics) OnClaim(_ context.Context, c relay.ClaimInfo) {
	if c.Err != nil {
		m.claimErrs.Inc()
		return
	}
	m.batch.Observe(float64(len(c.Events)))
}

// OnPublishEnd implements relay.HookPublishEnd. The published counter is
// looked up once per run of events with the same topic, not per event.
func (m *Metrics) OnPublishEnd(_ context.Context, p relay.PublishInfo) {
	m.publish.Observe(p.Took.Seconds())
	now := time.Now()
	runTopic, run := "", 0
	flush := func() {
		if run > 0 {
			m.published.WithLabelValues(m.topic(runTopic, run)).Add(float64(run))
		}
	}
	for i := range p.Events {
		e := &p.Events[i]
		if i >= len(p.Results) {
			break
		}
		if err := p.Results[i].Err; err != nil {
			m.failed.WithLabelValues(m.topic(e.Topic, 1), errorKind(err)).Inc()
			continue
		}
		if e.Topic != runTopic || run == 0 {
			flush()
			runTopic, run = e.Topic, 0
		}
		run++
		if !e.CreatedAt.IsZero() {
			m.latency.Observe(max(now.Sub(e.CreatedAt), 0).Seconds())
		}
	}
	flush()
}

// OnSettle implements relay.HookSettle. A lost lease is counted here, once
// per batch, whether renewing it or the ack found it gone.
func (m *Metrics) OnSettle(_ context.Context, r relay.BatchReport) {
	m.settled.WithLabelValues("delivered").Add(float64(r.Delivered))
	m.settled.WithLabelValues("retried").Add(float64(r.Retried))
	m.settled.WithLabelValues("dead").Add(float64(r.Dead))
	m.settled.WithLabelValues("released").Add(float64(r.Released))
	if r.LeaseLost {
		m.leaseLost.Inc()
	}
}

// topic is the label value of topic for n events: the topic itself while
// it is among the first maxTopics seen, else OtherTopic (counted).
func (m *Metrics) topic(topic string, n int) string {
	m.tmu.RLock()
	_, ok := m.topics[topic]
	full := len(m.topics) >= m.maxTopics
	m.tmu.RUnlock()
	if ok {
		return topic
	}
	if !full {
		m.tmu.Lock()
		if len(m.topics) < m.maxTopics {
			m.topics[topic] = struct{}{}
			ok = true
		}
		m.tmu.Unlock()
		if ok {
			return topic
		}
	}
	m.overflow.Add(float64(n))
	return OtherTopic
}
