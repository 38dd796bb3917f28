// Package broker is the seam a message broker adapter implements: publish a
// batch, wait for the broker's confirmation of each message, and report one
// result per message. Adapters know nothing of databases or of the relay.
//
// An adapter classifies each failure: Permanent errors (payload too large,
// unroutable, rejected) make the relay bury the event at once; anything else
// is retried with backoff.
//
// Implementations live in broker/membroker (in-memory, for tests),
// broker/natsbroker and the other *broker packages; each passes the suite in
// broker/brokertest.
package broker
