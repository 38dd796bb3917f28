// Package relay is the engine that turns committed outbox rows into broker
// messages: it claims batches from a store.Store under a lease, publishes
// them through a broker.Broker, waits for every confirmation, and only then
// acknowledges them back to the store, in one round trip per outcome.
//
// Guarantees, and how they are kept:
//
//   - At least once, never lost: an event leaves the table only after the
//     broker confirmed it. A relay killed at any point loses nothing: its
//     claims expire and another relay (or the same one, restarted) takes
//     them again.
//   - Order per key: the store never hands out an event whose key has another
//     event in flight, retrying, delayed or (by default) dead. Inside a batch
//     the relay publishes one "wave" per position within a key, so the n-th
//     event of a key is sent only after the (n-1)-th was confirmed; when one
//     fails, the later events of its key are released untouched and wait
//     behind it. Keyless events all go in the first wave.
//   - Retry with exponential backoff and full jitter, capped; permanent
//     errors (broker.IsPermanent) and events out of attempts go DEAD with
//     their reason. By default a dead event holds its key until an operator
//     requeues it (outbox dead retry); Config.DeadKeys can choose to move on.
//   - Leases are renewed while a batch is in flight; every publish has a
//     deadline; every state change is fenced by the claim's (owner, epoch),
//     so a relay that stalled past its lease changes nothing.
//   - No hot loop: when the broker or the database fails, the relay backs off
//     (with jitter, capped) and logs once per change of state. While the
//     broker cannot be reached at all (broker.ErrUnavailable), claimed
//     events go back untouched: an outage costs them no attempts.
//
// Throughput and latency: each worker settles a batch (ack, retries,
// releases) in the background while it claims and publishes the next; a
// wake-up (Store.Notify, or Wake) sends one idle worker, and a worker that
// claimed a full batch brings another in; after a round that found events a
// worker looks again after 2, 10 and 50 ms, because wake-ups may be
// coalesced, before it falls back to PollInterval. Stores probe for commits
// that carry no notification (plain SQL from any language) every few
// milliseconds while a relay listens, so those are found quickly too.
//
// Observing: Config.Hooks take values implementing any of HookClaim,
// HookPublishStart (which may replace the publish's context, for a tracing
// span), HookPublishEnd (each event's result), HookSettle, HookLease and
// HookHealth; Relay.Health is a snapshot for readiness checks (failing
// since when, last delivery, events in flight).
package relay
