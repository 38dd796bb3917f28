// Package source is the seam between a source of committed events and
// the delivery loop that publishes them. Its implementations:
// source/pgcdc (PostgreSQL logical replication, table and table-less
// modes) and source/pollsource (the poller: claims from a store.Store
// under leases). source/sourcetest is the conformance suite every Source
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
//
// # What the engines share, and what not yet
//
// relay.NewSource runs a Source through Loop inside a relay.Relay:
// Config.Observer carries the loop's reads, publish calls and settles to
// the relay's hooks (HookClaim, HookPublishStart/End, HookSettle,
// HookHealth), its Health snapshot and Totals, so metrics, tracing,
// /readyz and the dashboard work the same for `outbox relay --source
// pgcdc` as for the polling relay. Both engines decide a failed attempt by
// the same code (retry and DEAD rules, the reasons, the backoff with full
// jitter and Retry-After).
//
// Loop and the relay's two engines publish through one per-key
// dispatcher, internal/dispatch: it orders a set of events by key (each
// waits for its predecessor, in the set or, through a ticket, in an
// earlier set still in flight), sends a key-ordered broker a key's events
// in one call, bounds each call, and gives back untried whatever waits
// behind a failed event or was not sent before a stop. The relay's sets
// are its claimed batches. Loop's are the events that may go when a
// publish call could start, each set on its own goroutine, several in
// flight at once and at most InFlight publish calls across them: a key's
// event whose predecessor is in a set still in flight joins the new set
// behind that predecessor's ticket, as ordering by ownership does across
// batches. A key's events are in at most two sets at once: what comes
// next gathers until the first of them is back, and then goes in one set
// (on a key-ordered broker, one call), not one set per read. Unlike the
// relay on a broker that keeps no order, Loop does not cut a set's ready
// events into several calls when none is in flight (dispatch.Set.NoCut):
// a call takes what is ready, up to BatchSize. What feeds the sets stays
// Loop's own: each key's unsettled events in commit order, retries (in memory, with their
// backoff), AvailableAt delays, the pause while the broker is unreachable,
// and the Positions it acknowledges. A key one of whose events came back
// unsettled (retried, held back, given back) joins no new set until every
// one of its events in a set is back; it then goes again from its first
// unsettled event. The relay settles by event id against leased rows
// (retry and release write to the store, an attempt counter lives in the
// row, a DEAD event can hold its key), while Loop settles by counting
// events off transactions. The poller can already run through Loop
// (source/pollsource); making that the relay's only path needs the
// relay's lease renewal per batch, its HoldKey policy and its ownership
// shards expressed through the Source seam first.
package source
