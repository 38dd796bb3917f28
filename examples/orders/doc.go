// Package orders is the demo's story as a small program: an order service
// writes each order and, when it is paid, an OrderPaid event into the
// outbox in the same transaction; a relay delivers the events to a broker;
// three consumers (points, shipping, notifications) each apply every event
// exactly once in effect, through their own inbox records, although the
// broker delivers at least once.
//
// It runs on SQLite, PostgreSQL or MariaDB, with NATS JetStream as the
// broker (embedded by default: see `outbox demo`).
package orders
