// Package source is the seam between a source of committed events (a log
// tail: PostgreSQL logical replication in source/pgcdc, later the MySQL
// binlog; the poller too, once the engine is rebuilt around it) and the
// delivery loop that publishes them.
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
// Deliver is the loop, for now (the engine v2 helpers will fold it into
// relay; see below). Its rules are the engine's:
//
//   - Order per key is commit order. A key's next event is published only
//     after its previous one was confirmed (or, on a broker whose Ordering
//     is OrderKey or stronger, in the same publish call, after it). A
//     failing event holds only its own key: the other keys keep flowing.
//     Events held back behind a failure are given back without counting
//     an attempt.
//   - Retries back off exponentially with full jitter, capped. An event
//     goes DEAD (is parked) after MaxAttempts failed attempts or at once on
//     a permanent error (broker.IsPermanent). A broker that cannot be
//     reached at all (broker.ErrUnavailable) costs no attempts; the loop
//     backs off.
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
//
// # How the engine will consume it
//
// The engine v2 dispatcher keeps per-key FIFO queues and settles each event
// as the broker answers. A Source plugs into it as the poller does, with
// two differences: an event is settled by counting it off its transaction
// (the engine acknowledges Positions, not ids, and only the lowest fully
// settled one), and a failed event is retried in memory (there is no row to
// give back) and parked through Source.Park when it goes DEAD. Deliver is
// written that way so that its dispatcher can move into relay unchanged;
// until then `outbox relay --source pgcdc` runs Deliver.
package source
