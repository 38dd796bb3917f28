// Package telemetry attaches Prometheus metrics and health endpoints to a
// relay, through the relay's hooks (relay.Config.Hooks) and its Health
// snapshot, so the engine itself knows nothing of Prometheus.
//
// Metrics (all prefixed outbox_; no payloads, ids or keys in labels; topic
// is a label for the first MetricsConfig.MaxTopics distinct topics, default
// 100, and "other" for the events of any later one, so producers' data
// cannot grow the series without bound; the other labels take fixed
// values):
//
//	outbox_events_published_total{topic}          counter   events the broker confirmed
//	outbox_publish_failures_total{topic,kind}     counter   per event; kind = transient, permanent, unavailable
//	outbox_metrics_topics_overflow_total          counter   events counted under topic="other"
//	outbox_events_settled_total{outcome}          counter   delivered, retried, dead, released (released untried)
//	outbox_delivery_latency_seconds               histogram commit (database clock) → broker confirmation (relay clock)
//	outbox_publish_duration_seconds               histogram one publish call
//	outbox_claim_batch_events                     histogram events per claim, empty claims included
//	outbox_claim_errors_total                     counter   claims the store failed
//	outbox_lease_lost_total                       counter   batches whose lease was lost mid-flight
//	outbox_pending_events                         gauge     events waiting, estimated by id span (store.Backlog)
//	outbox_oldest_pending_age_seconds             gauge     age of the oldest due event (store.Backlog)
//	outbox_dead_events                            gauge     DEAD events, counted up to store.DeadCap (10,000)
//	outbox_backlog_up                             gauge     0 when the three gauges above could not be read
//	outbox_in_flight_events                       gauge     claimed by this relay, not settled
//	outbox_inflight_bytes                         gauge     payload bytes of those events (relay.Config.MaxInflightBytes)
//	outbox_last_delivery_timestamp_seconds        gauge     Unix time of the last delivery (0: none yet)
//	outbox_store_up, outbox_broker_up             gauge     0 while failing as a whole (or not reached yet)
//	outbox_ready                                  gauge     1 while /readyz answers 200 (exported once Handler is built)
//
// The gauges are read at scrape time from the relay's own state and from
// store.BacklogReader, whose cost does not grow with the backlog; results
// are reused for a second, so several scrapers cost one query.
//
// Health (Handler): /healthz answers 200 while the process runs; /readyz
// answers 503, one reason a line, when delivery has stalled: the store, the
// broker or the backlog query failing for longer than Grace, or the oldest
// due event (not one held by its next attempt or behind a DEAD event of
// its key) older than StallAfter while nothing was delivered for that
// long, or,
// while the process is still connecting (NewState(nil, nil), Connecting),
// naming what it waits for.
//
// Alerting: alerts/outbox-rules.yml holds Prometheus alert rules over these
// metrics (with unit tests for promtool test rules), grafana/outbox.json a
// Grafana dashboard.
//
// Tracing (OpenTelemetry): a producer stores the W3C trace context of its
// span with the event, as the traceparent and tracestate headers
// (WithTrace, or TraceHeaders for a producer that writes the headers
// column itself). The headers travel to the broker unchanged, so a consumer
// extracts the traceparent and links its span to the producer's span. The
// Tracing hook records the relay's side, with the messaging attributes of
// the semantic conventions: by default one span per publish call, the root
// of a trace of its own, linked to the producers' spans (OpenTelemetry's
// batch publishing), which costs the relay next to nothing; with
// TracingConfig.PerEvent a span per event, a child of the producer's, with
// its CloudEvents type and what the broker answered (stream and sequence,
// partition and offset, the error), at the cost of a recorded span per
// event.
package telemetry
