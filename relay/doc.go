// Package relay is the engine that turns committed outbox rows into broker
// messages: it leases shards of the outbox table, claims batches from them,
// publishes them through a broker.Broker, waits for every confirmation, and
// only then acknowledges them back to the store, in one round trip per
// outcome. NewSource runs the same engine over a source.Source (a log such
// as source/pgcdc) instead of a store.
//
// Run one inside your own process (`outbox relay --db URL --broker URL`
// does the same from the command line):
//
//	st, err := pgstore.Open(ctx, "postgres://user:pass@host:5432/app", pgstore.Config{}) // or mysqlstore, sqlitestore
//	br, err := natsbroker.Dial("nats://127.0.0.1:4222", natsbroker.Config{})           // or any broker/… adapter
//	r, err := relay.New(st, br, relay.Config{})                                         // zero Config: the defaults
//	err = r.Run(ctx) // delivers until ctx ends, then stops gracefully
//
// Several relays, in one process or many, share the table's work and keep
// each key's order. A complete program: examples/quickstart/relay in the
// repository. The rest of this comment says how the engine works.
//
// Guarantees, and how they are kept:
//
//   - At least once, never lost: an event leaves the table only after the
//     broker confirmed it. A relay killed at any point loses nothing: its
//     claims expire and another relay (or the same one, restarted) takes
//     them again.
//   - Order per key: each relay owns part of the table (below) and orders
//     each key's events in memory across batches. The n-th event of a key
//     is sent only after the (n-1)-th was confirmed (or, on a key-ordered
//     broker, together with it in one call); when one fails, the later
//     events of its key are released untouched, without counting an
//     attempt, and wait behind it.
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
// # Latency
//
// Each worker settles a batch (ack, retries, releases) in the background
// while it claims and publishes the next; a wake-up (the store's Notify, or
// Wake) sends one idle worker, and a worker that claimed a full batch
// brings another in. Stores probe for commits that carry no notification
// (plain SQL from any language) every millisecond while a relay listens
// and commits arrive, every 5 ms while none do (store.Options
// .ProbeInterval, `outbox relay --probe`), and such a store
// (driver.Watcher) wakes the relay after every commit. Where nothing
// probes, a worker looks again 2, 10 and 50 ms after a round that found
// events, because wake-ups may be coalesced, before it falls back to
// PollInterval; where a probe runs, those looks would be claims that
// mostly find nothing, each holding back the claim behind it, so the
// relay makes none. Events enqueued through a Store (NOTIFY on PostgreSQL,
// in-process signals) do not wait for the probe.
//
// # Ordering by ownership
//
// The relay does not ask the store to exclude keys in flight; it owns part
// of the table instead, as a consumer of a Kafka consumer group owns
// partitions:
//
//   - Shards. The database puts each row in one of a fixed number of
//     shards by a hash of its key (keyless rows by id on PostgreSQL): 64
//     on PostgreSQL and MariaDB, one on SQLite, which has a single writer
//     anyway. All of a key's rows are in one shard.
//   - Leases. A balance loop heartbeats every LeaseFor/3 (the store's
//     Balance, with the database's clock): it renews the relay's shard
//     leases, takes free or expired shards up to its fair share of the
//     live relays, and is told which of its shards another relay waits
//     for (Revoke). A revoked shard is no longer claimed from; once every
//     batch claimed from it is settled, the next heartbeat (at once)
//     releases it, and a relay short of its share heartbeats every
//     LeaseFor/300 (at least 20 ms) until it has it. The relays holding
//     more than their share learn of a short one at once, not at their
//     next heartbeat: over a notification on PostgreSQL, and on MariaDB
//     in the 500 ms look below (driver.Sessions' Rebalance). A stopping relay
//     settles everything and then gives all its shards up (Leave), so the others take them at once instead of
//     after a lease period. A relay that died loses them when their lease
//     runs out, or within about a second where the store sees its
//     database session end (driver.Sessions: PostgreSQL, MariaDB): the
//     balance loop asks every 500 ms and balances at once, and the
//     takeover is fenced as after a lease's end; a stopped or cut-off
//     relay whose session lives keeps the lease as the bound. Rebalancing is cooperative, like franz-go's
//     cooperative-sticky balancer: a shard changes hands only after its
//     owner settled its work or its lease expired, and a shard's new
//     owner cannot claim from it while a claim of the old owner is live.
//   - Claims. One relay's claims are serialized (one at a time, whatever
//     Workers is), so claim order is each key's order. A claim reads only
//     the relay's non-revoked shards, and is not held back by the relay's
//     own events in flight: a hot key's next events are claimed while its
//     earlier ones are still being published. The lock of the relay's
//     shard view and key chains is never held across a round trip, so a
//     heartbeat, a settle or Health does not wait for a claim in the
//     store. While the relay keeps up (its last claim did not fill its
//     batch), a worker that finds one claim running and another waiting
//     does not claim: the waiting one starts later and takes all it would
//     have. A shard revoked while a claim reads it counts that claim as its
//     work: it is released only once the claim's batch is settled.
//   - A byte budget (Config.MaxInflightBytes, default 64 MiB) bounds the
//     payload bytes claimed and not settled. No claim starts while the
//     events held weigh the budget (workers wait for a settle), and each
//     asks the store for at most the bytes left (driver.ClaimParams
//     .MaxBytes): the store cuts its claim to a prefix in id order, which
//     keeps every key's order, and takes at least one event, so the relay
//     holds at most the budget plus one event.
//   - The per-key dispatcher (internal/dispatch). Each claimed keyed event
//     takes a ticket behind the previous claimed event of its key, which
//     may be in an earlier batch still in flight. It is published only
//     after that one was confirmed by the broker (or, on a broker that
//     keeps a key's order within a call, broker.OrderKey and
//     OrderPartition, in the same call right after it). When the earlier
//     event fails (a retry, DEAD), or is released (stop, outage, lost
//     lease), the later events of the key are released too, without
//     counting an attempt, and the store parks them behind the failed one:
//     they come back once it is delivered, requeued or purged. A key's
//     tickets are forgotten only after every outcome of its claimed events
//     is written to the store, and never while a claim that began before
//     they were written is still running: such a claim may take the key's
//     next event (a retry written meanwhile does not hold back a snapshot
//     that predates it), and first places it behind them. A claim that
//     finds a key forgotten saw those outcomes: a relay never has two
//     unsettled outcomes of a key in the wrong order. When an outcome
//     cannot be written at all, the key waits until the batch's lease has
//     surely run out (LeaseFor after the last claim or renewal that may
//     have set it returned, a renewal that failed on the relay's side
//     included, plus LeaseFor/3), by when the store hands the event back
//     to the next claim before the key's later ones. Likewise a claim that
//     failed may have committed unseen (its answer lost with the
//     connection): the relay claims nothing more until such a lease has
//     run out, rather than risk a key's later events overtaking the ones
//     it would hold. Keyless events need no ticket.
//   - Dispatch is event-driven: when a publish call returns, the next
//     events of the keys it confirmed go out at once, in a new call, while
//     the batch's other call is still in flight (two at most per batch;
//     the broker's MaxInFlight bounds the events across all calls). Events
//     ready together go in one call; on a broker that keeps no order, a
//     ready set found with no call in flight is cut in two, so that the
//     keys' chains drift apart instead of all waiting, call after call,
//     for the slowest ack of one shared call.
//   - One hot key is bound by the broker's round trip. On a broker that
//     keeps no order after a failure (broker.OrderNone: NATS JetStream,
//     which can store event k+1 of a key and fail k), a key's next event
//     may go only once the broker confirmed the previous one, so one key
//     moves one event per publish call, whatever the batch size, the
//     workers or the relays (one relay owns the key's shard). A
//     key-ordered broker (OrderKey, OrderPartition) sends a key's events of
//     a batch in one call instead.
//   - Fencing: every claim has its own (Owner, Epoch) and each ack, retry,
//     burial and release is checked against it; shard leases carry epochs
//     too, and a claim checks in the database that its owner still holds
//     each shard under the epoch it names. A relay that stalls past its
//     leases (a SIGSTOP, a long GC pause) changes nothing when it wakes:
//     its claims were taken over, and its next heartbeat finds its shards
//     under new epochs.
//
// Why own shards rather than skip the keys in flight: a claim that skips
// every row whose key is in any live claim bounds concurrency by the keys
// in the backlog and reads past all the rows of held keys. Owning shards
// makes a claim cost O(batch) whatever the key distribution, and relays
// add up.
//
// Owner names: an Owner given in Config gets "~" and 8 random hex digits
// per process (Relay.Owner says the result; a name that ends so already is
// kept), so that a relay restarted under the same name is a new owner and
// waits for the claims of the process that died.
//
// Observing: Config.Hooks take values implementing any of HookClaim,
// HookPublishStart (which may replace the publish's context, for a tracing
// span), HookPublishEnd (each event's result), HookSettle, HookLease,
// HookHealth and HookShards (each heartbeat); Relay.Health is a snapshot
// for readiness checks (failing since when, last delivery, events in
// flight, shards held).
//
// # Sources: the log loop
//
// NewSource runs a source.Source (a log tail such as source/pgcdc) inside
// the same engine: the same per-key dispatcher (relay/internal/dispatch),
// the same publish call (the broker's in-flight window, PublishTimeout,
// the publish hooks), the same judgement of each result (retry, DEAD,
// released, broker unreachable) and the same retry rules
// (relay/internal/retry), the same hooks, Health and Totals. What differs
// is what feeds the dispatcher and where outcomes go: a source hands out
// committed transactions in commit order with a Position each (the source
// package doc says what it must promise), and the relay settles by
// counting events off transactions, then acknowledges a Position once
// every event up to it is settled. The log loop lives in this package
// (source.go, source_sets.go, source_settle.go), not under
// relay/internal, so that it reports to the hooks, Health and Totals
// directly, without a layer translating its own events into them.
//
//   - Order per key is commit order. A key's next event is published only
//     after its previous one was confirmed (or, on a broker whose Ordering
//     is OrderKey or stronger, in the same publish call, after it). A
//     failing event holds only its own key. Events held back behind a
//     failure are released without counting an attempt.
//   - Sets. The events that may go when a publish call could start form a
//     set, dispatched on its own goroutine; several sets are in flight at
//     once, with at most Workers publish calls across them. A key's event
//     whose predecessor is in a set still in flight joins the new set
//     behind that predecessor's ticket, as ordering by ownership does
//     across batches. A key's events are in at most two sets at once: what
//     comes next gathers until the first of them is back and then goes in
//     one set (on a key-ordered broker, one call). A key one of whose
//     events came back unsettled (retried, held back, released) joins no
//     new set until every one of its events in a set is back; it then goes
//     again from its first unsettled event. A call takes what is ready, up
//     to BatchSize (dispatch.Set.NoCut).
//   - Retries are kept in memory with their backoff; an event goes DEAD
//     (Source.Bury, with the reason a store's relay writes) after
//     MaxAttempts failed attempts or at once on a permanent error. A
//     broker that cannot be reached at all costs no attempts: the loop
//     pauses one backoff step per call that found it so.
//   - A DEAD event does not hold its key's later events (DeadKeys is
//     ignored): a log source cannot hold a key without holding its
//     acknowledgement, and with it the server's log (WAL) without bound.
//   - An event with a future AvailableAt waits until then and holds its
//     key's later events meanwhile. Its transaction's Position is not
//     acknowledged before it is delivered: a log source retains its log
//     that long, so keep such delays short under CDC.
//   - The Position acknowledged never passes an unsettled event. At most
//     20,000 events read and not settled are held in memory, and at most
//     MaxInflightBytes of payload plus the one read under way; past
//     either the relay reads no more until some settle. A stop lets the calls in
//     flight finish within DrainTimeout and acknowledges what settled; the
//     source replays the rest after a restart.
package relay
