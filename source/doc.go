// Package source is the seam between a source of committed events and
// the delivery loop that publishes them. Its implementations:
// source/pgcdc (PostgreSQL logical replication, table and table-less
// modes). source/sourcetest is the conformance suite every Source
// passes (committed only, commit order, growing positions, idempotent Ack,
// at least once across restarts, Park visible as DEAD, fencing, Next's
// cancellation); later sources (the MySQL binlog) run it too.
//
// A Source hands out committed transactions in commit order, each with a
// Position; the loop publishes their events through a broker.Broker and
// acknowledges a Position once every event of every transaction up to it
// is settled: confirmed by the broker, or parked (DEAD, with its reason, in
// a place operators look at). A source that tails a log advances its read
// position (a replication slot's confirmed flush LSN) only on Ack, so a
// crash at any point replays what was not yet acknowledged: duplicates are
// possible after a restart, and carry the same event id; nothing is lost.
//
// Loop is the delivery loop for Sources. Its rules are the engine's:
//
//   - Order per key is commit order. A key's next event is published only
//     after its previous one was confirmed (or, on a broker whose Ordering
//     is OrderKey or stronger, in the same publish call, after it). A
//     failing event holds only its own key: the other keys keep flowing.
//     Events held back behind a failure are given back without counting
//     an attempt.
//   - Retries back off exponentially with full jitter, capped, and never
//     sooner than the broker asked (a Retry-After). An event goes DEAD (is
//     parked) after MaxAttempts failed attempts or at once on a permanent
//     error (broker.IsPermanent), with the same reasons the polling relay
//     writes ("permanent: …", "gave up after N attempts: …"). A broker that
//     cannot be reached at all (broker.ErrUnavailable) costs no attempts;
//     the loop backs off.
//   - A DEAD event does not hold its key's later events: they are
//     delivered after it (the relay's SkipKey policy). A log source cannot
//     hold a key without holding its acknowledgement, and with it the
//     server's log (WAL) without bound; the DEAD event is visible to
//     `outbox dead list` and can be requeued.
//   - An event with a future AvailableAt waits until then and holds its
//     key's later events meanwhile (as the poller does). Its transaction's
//     Position is not acknowledged before it is delivered: a log source
//     retains its log that long, so keep such delays short under CDC.
//   - The Position acknowledged never passes an unsettled event.
package source
