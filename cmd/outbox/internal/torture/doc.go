// Package torture proves the outbox's promises under faults, Jepsen-style:
// it runs a workload against real relay processes while injecting a seeded,
// reproducible schedule of faults, records a history, and checks it.
//
// # Workload and history
//
// Writers run business transactions concurrently. Each one bumps an
// aggregate's version (UPDATE … RETURNING version; UPDATE then SELECT on
// MariaDB), enqueues the event with that version through the store's
// EnqueueTx, and inserts a ledger row with the payload's hash, all in one
// transaction. A share is rolled back after enqueueing (those events must
// never be delivered) and a share is held open while later ones commit
// (out-of-order commits, which defeat a high-water-mark poller). The ledger
// is the committed set, also for a COMMIT whose outcome the client never
// learned (a timeout during COMMIT).
//
// The relays are real `outbox relay` processes. A consumer in the test
// process reads the broker (a durable JetStream consumer), records every
// delivery in a history table (broker position, redelivery count, inbox
// outcome, time) and applies it through inbox.Handle in the same database.
//
// # Faults
//
// One seeded schedule (Plan; the seed is in the summary), executed one
// fault after another: SIGKILL of a relay mid-batch; SIGSTOP longer than the
// lease, continued right after another relay took its claims over; on
// PostgreSQL pg_terminate_backend of relays and writers, and (soaks only)
// pg_ctlcluster restart; through TCP proxies of this process: the
// relay↔broker connection reset right after a publish (the message is
// stored, its confirmation lost), a silent link then reset, latency beyond
// the lease on the relay↔database link, the writer↔database link paused
// longer than the writers' deadline (COMMIT timeouts); and a restart of an
// embedded broker.
//
// # Checker
//
// Check names the anomalies: lost (a committed event not delivered after
// the final drain), phantom (delivered but not committed, or with another
// payload hash), order (per key, first deliveries must be versions 1..N
// exactly), duplicates (counted, and allowed only near a fault), double- or
// not-applied (the inbox), stale writes (PostgreSQL: a trigger records any
// change to an outbox row by a relay session that did not hold its claim,
// read from <table>_claims and a per-transaction log of claim rows),
// and workload errors (the ledger contradicting the client). Self-recovery:
// within 60 s of the last fault healing, nothing is pending and no lease is
// expired.
//
// # The source=pgcdc cell
//
// Three `outbox relay --source pgcdc` processes share a replication slot and
// publication of the run's own (dropped with the tables): one streams, the
// others wait on its lease. Kill and Stop aim at the one that streams (the
// holder of the lease in <table>_cdc); Stop continues it right after
// another relay took the lease over. pg_terminate_backend ends the relays'
// walsenders with their other sessions. The fencing probe records any
// change to an outbox row (the deletes after delivery) by a relay session
// whose owner did not hold the lease. The checker is the same; the slot
// check follows the final drain: within 30 s the slot's confirmed flush LSN
// reaches the WAL position read once everything was delivered, and no row
// is left in the outbox table (the summary's cdc_slot).
//
// Each run ends with one summary line holding every figure and the seed;
// a failed run also writes a JSON history file whose path is in the
// failure.
//
// # Running it
//
// go test ./cmd/outbox/internal/torture runs the short Matrix (each store × NATS
// JetStream, plus an embedded-broker cell that restarts the broker, hot-key
// cells with relays leaving and joining, and a pgcdc cell) and the
// deliberately broken relays, which the checker must report. Those broken
// relays live only in the test binary. Longer soaks: `outbox torture --db
// URL [--broker URL] --duration 30m --seed N`, or `make soak`.
package torture
