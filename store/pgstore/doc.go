// Package pgstore is the PostgreSQL store (pgx v5; PostgreSQL 14 or newer):
// it enqueues inside the caller's pgx.Tx or *sql.Tx (database/sql through
// pgx's stdlib driver, or any PostgreSQL driver), or on the caller's
// pgx.Batch so the event rides the business statements' round trip
// (EnqueueInBatch), and gives the relay engine its claim/ack/retry seam.
//
// A claim (Claim, below) is one round trip: the takeover of expired
// claims, and one statement that reads the next free rows of the caller's
// shards in id order and records them as one row of <table>_claims (owner,
// fencing epoch, lease expiry, the ids as ranges, the shards);
// that transaction commits before the claimed events are read back by the
// claim's ranges in the same round trip. The outbox rows
// are not written by a claim: their status column stays NEW while in flight,
// and Get and Stats report SENDING from the claim. Acks are one DELETE (or
// one DELETE … RETURNING feeding an INSERT into the archive table when sent
// events are kept) that also takes the ids out of the claim; a whole claim's
// ack walks the primary key once per range. One small partial index
// covers only dead and delayed rows, so ordinary inserts maintain just the
// primary key and the event_id unique index.
//
// # Ordering by ownership
//
// Balance and Claim keep per-key order by ownership, as Kafka
// consumer groups do with partitions, rather than by skipping every row
// whose key is in any live claim (which bounds concurrency by the number
// of distinct keys and makes a claim read past every row of the held
// keys):
//
//   - Shards. A table has 64 shards. A row's shard is computed by the
//     database from the row (a keyless row's id, or hashtext of the key,
//     masked to 6 bits: shardExpr), so a plain-SQL producer names no new
//     column: all of a key's rows are in one shard, keyless rows spread by
//     id. An expression index on (shard, id) over the pending rows that
//     are not parked serves the claim.
//   - Leases. <table>_shards holds one row per shard (owner, epoch,
//     lease_until), <table>_relays one heartbeat per relay. Balance renews
//     the caller's leases and membership, takes free or expired shards up
//     to its fair share (64 / live relays; the first 64 mod n relays by
//     name get one more, so the shares sum to 64), raising the shard's
//     epoch on every change of hands, and marks the shards over the share
//     Revoke when another relay is short and no free shard is left. A
//     shard changes hands only when its owner releases it (after settling
//     its events) or its lease expires: cooperative, like franz-go's
//     cooperative-sticky balancer. Every time is the database's clock.
//     Balance is one round trip and waits for no claim (see Balance), so
//     a heartbeat stays fast on a loaded database.
//   - Claims. Claim runs one claim of an owner at a time (an advisory
//     lock on the owner's name, held to its commit; a takeover of a free
//     or expired shard tries its last owner's lock (a released shard
//     keeps its owner's name) and passes over the shard while a claim
//     holds it, so a claim that began under a live lease commits before
//     the shard changes hands, and a claim locks no shard row a heartbeat
//     could wait for), takes over expired claims touching
//     its shards, then in one
//     statement checks each shard is still the caller's under its epoch,
//     skips the shards a live claim of another owner touches (a claim row
//     records its shard list), and merges one walk per shard of the shard
//     index in id order under the batch's LIMIT (a Merge Append: it reads
//     as far as the batch needs). There is no global lock and no key
//     exclusion against the owner's own claims: the relay may claim a
//     key's next events while the earlier ones are in flight and orders
//     them itself. A claim costs O(batch + the owner's own rows in
//     flight), whatever the backlog behind it. Most claims of a relay
//     that keeps up find little or nothing (every commit wakes every
//     relay, and a relay looks again after each batch), and each branch
//     of the merge costs about as much as a whole claim
//     of a few rows: so while its last claim took less than half its
//     batch, a claim reads its shards by runs of consecutive ones (a
//     relay's shards are one run or a few), each one range scan of the
//     shard index in shard and id order, stopped after four batches'
//     rows, and sorts what it read by id; what it takes of each shard is
//     still a prefix of its pending rows in id order. Only after a claim
//     that filled half its batch (a backlog) does the next one walk the
//     merge. The statements name their shards by parameter (branch k
//     walks shard $6[k], or the run $9[k] to $10[k]), so a table has at
//     most fourteen of them (1, 2, 4 … 64 branches, of each shape), each
//     planned once per connection (and as many more for
//     ClaimOwnedReads, which parks inside the statement). Claims run on
//     the pool (BENCHMARKS.md, "Tried, and undone", says why not on a
//     connection of their own).
//   - Parking. A keyed row is not claimable while an earlier row of its
//     key waits for a retry or a delayed AvailableAt, is DEAD (with
//     HoldDeadKeys), or is parked. The claim that meets such a row sets its
//     parked column, so it leaves the shard index and no claim reads it
//     again: a claim behind 100,000 rows of a held key reads about its
//     batch (storetest's Owned/ClaimReadsBounded counts it with EXPLAIN
//     ANALYZE). A key's parked rows are unparked, lowest ids first and at
//     most 1,000 per statement, by the ack of one of its rows (the
//     blocking row, once due, is claimed and acked like any other), by a
//     bury or release, by RequeueDead and by the purge of its DEAD rows;
//     each guarded by one probe of a partial index on parked rows, so a
//     table with none pays nothing. Parking is a cache, never the truth:
//     the claim decides holds from the rows as they are, so a row unparked
//     too early is parked again, and Balance sweeps a bounded number of
//     keys per call for parked rows with nothing holding them any more (a
//     requeue, purge or ack that committed while a claim was parking:
//     a claim parks the rows it found held right after it commits,
//     rechecking each, and unfenced, so a relay that lost its shards
//     meanwhile may park one too).
//   - Fencing is unchanged: every state change of an event checks the
//     claim's (owner, epoch) under its row lock, and a takeover deletes the expired claim
//     row, which waits for that lock. A stopped relay that wakes finds its
//     claims taken over (ErrLeaseLost), its Claim refused with
//     ErrLeaseLost when it holds none of the shards it names, and its
//     Balance showing new epochs.
//
// Dialect difference: SQLite has one writer and runs embedded, so
// sqlitestore has one shard; mysqlstore computes a row's shard in generated
// columns (CRC32 of the key; see its package doc).
//
// Claims walk the primary key from its start, so the dead index entries of
// drained rows slow every claim until VACUUM removes them; a Store vacuums
// its table in the background after Config.VacuumAfter deleted rows instead
// of waiting up to a minute for autovacuum (vacuum.go).
//
// The claim and the read of its events keep one generic plan per
// connection, and AckClaim may (plan_cache_mode auto keeps a generic plan
// once it costs no more than the custom ones). A plan is made from the
// statistics of its moment, often just after a VACUUM found the tables
// nearly empty (this one of the outbox and claims tables, autovacuum's of
// the shards table, which every heartbeat rewrites), and must stay right
// once a backlog builds behind it: so these statements reach rows by index
// conditions and id = ANY(array), and join only into a primary-key range
// per row of a claim, never in an order the statistics could turn into a
// walk of the whole table (measured: an unparking join made AckClaim read
// every row of the backlog, 46 ms an ack behind 100,000 rows).
// claimplan_internal_test.go makes the plans after a VACUUM and runs them
// with 20,000 rows waiting.
//
// The table contract's cheap rules (a known status, a non-empty topic and
// event_type, a non-negative schema_version, headers a JSON object) are
// CHECKs on domains of the columns, so a producer's bad INSERT is refused at
// once: a table CHECK is prepared anew for every INSERT statement and cost a
// one-row enqueue several times more backend CPU than the domains do
// (schema.go). The other rules are checked by the claim, which
// buries a row that breaks them DEAD with the reason.
//
// Enqueues send pg_notify on a channel the relay LISTENs to, at most one per
// Config.NotifyInterval per Store (PostgreSQL serializes notifying commits);
// a hint only: the relay keeps polling, and looks again a few milliseconds
// after each round that found events.
package pgstore
