// Package broker is the seam a message broker adapter implements: publish a
// batch, wait for the broker's confirmation of each message, and report one
// result per message. Adapters know nothing of databases or of the relay.
//
// An adapter classifies each failure: Permanent errors (payload too large,
// unroutable, rejected) make the relay bury the event at once; anything else
// is retried with backoff; ErrUnavailable (not connected, closed) gives the
// events back without counting an attempt.
//
// Optional abilities, found by type assertion: Describer declares the
// broker's Features (its ordering unit, so the relay pipelines a key's
// events as far as the broker keeps their order after a failure and no
// further; the largest message; a bound on events in flight), and
// ResultPublisher reports what the broker said of each event (stream and
// sequence, partition and offset, duplicate), which the relay hands to its
// hooks for tracing and dashboards. broker/brokertest holds each adapter to
// exactly what it declares.
//
// Implementations live in broker/membroker (in-memory, for tests),
// broker/natsbroker and the other *broker packages; each passes the suite in
// broker/brokertest.
package broker
