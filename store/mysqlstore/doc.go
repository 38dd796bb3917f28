// Package mysqlstore is the MySQL 8.0.23+ / MariaDB 10.6+ store
// (github.com/go-sql-driver/mysql): it enqueues inside the caller's *sql.Tx
// and gives the relay engine its claim/ack/retry seam, with the same table
// contract and the same per-key rules as store/pgstore.
//
// # Connecting
//
// Open takes the project's URL form, mysql://user:pass@host:3306/db?param=…,
// and owns its pool; DSN turns that URL into a driver DSN for callers who
// build their own *sql.DB; New wraps a pool the caller already has. Times
// are read as UNIX_TIMESTAMP(column), so parseTime and loc do not matter.
// The DSN sets interpolateParams=true (one round trip per statement instead
// of prepare/execute/close) and the session time zone '+00:00': MySQL does
// TIMESTAMP arithmetic in the session's zone, so with a zone that has
// daylight saving, lease and retry times computed in the hour the clocks go
// back can be an hour off. Columns are TIMESTAMP, stored in UTC, so rows
// enqueued through connections in any time zone agree.
//
// # What is written by hand, and why
//
// Every statement is plain SQL in this package, no query builder: the claim's
// correctness and speed depend on its exact shape and plan, which were
// checked with EXPLAIN ANALYZE on MariaDB 10.11 and are pinned with index
// hints (MySQL 8 could not be run here; the SQL uses only syntax both
// document).
//
//   - Claims of one table are serialized by GET_LOCK on a dedicated
//     connection, held for two autocommitted statements: a plain SELECT of
//     the candidates (it starts after the previous holder's UPDATE
//     committed, so it sees every claimed row; no row locks, so an open
//     transaction of a producer or an ack never blocks it) and an UPDATE by
//     primary key that re-checks claimability. Releasing the lock and reading
//     the stored lease expiry share a round trip: four in all. A relay
//     stopped inside a claim blocks other claims until its connection closes
//     (they give up after their GET_LOCK wait and poll again).
//   - MySQL has no partial indexes. A stored, invisible generated column
//     hold_key (the event_key of a SENDING, DEAD or delayed NEW row, NULL
//     otherwise) with one index on (status, hold_key, next_attempt_at) plays
//     the part of pgstore's two partial indexes: the claim's "is this key
//     held?" probes read only a key's holding rows, and a plain insert adds
//     one small index entry besides the primary key and event_id.
//   - Ack, Retry, Bury, Release and Extend are single autocommitted
//     statements, compare-and-swap on the lease: a paused relay never holds
//     row locks. With KeepSent an Ack is two of them, an INSERT … SELECT into
//     the archive (idempotent by id) and the DELETE; a crash between them
//     leaves the rows SENDING, to be delivered and archived again.
//   - Without clientFoundRows MySQL counts only changed rows. Every fenced
//     statement changes each row it matches, except Extend, which counts the
//     rows it still holds when the number falls short.
//
// The schema refuses an unknown status and headers that are not JSON at
// INSERT (CHECK constraints); the rest of the
// table contract is checked by the claim, which buries a row that breaks it
// DEAD with the reason: adding a CHECK to an existing table copies and
// checks the whole table, under a lock that stops enqueues.
//
// # Ordering by ownership (driver.Driver)
//
// Requires MariaDB 10.6+ (FOR UPDATE SKIP LOCKED, indexed VIRTUAL
// columns); it was built and tested on MariaDB 10.11. MySQL 8 is not
// tested here: its generated columns and SKIP LOCKED exist, but nothing
// was checked on it.
//
// A row's shard (64 of them) is computed by the database in VIRTUAL
// generated columns, so a plain 4-column INSERT by any producer works:
// CRC32(event_key) % 64, and for a keyless row CRC32(payload) plus the
// microseconds of created_at (MariaDB refuses the AUTO_INCREMENT id and the
// case-insensitive event_id in an indexed generated column; keyless rows
// only need spreading). Three indexes over generated columns replace
// pgstore's partial ones: (lane, id), the shard of a NEW row that is not
// parked, which a claim reads in one range while the relay keeps up and
// walks a page per shard in id order during a backlog; (busy,
// lease_until), the shard of an in-flight row, for "does another owner
// still work in this shard" and for taking over expired rows; and
// (parked_key, id) for a key's parked rows. A walk reads about its batch
// and the rows it parks, plus one probe per shard, whatever the backlog and
// however many rows are parked (storetest's ClaimReadsBounded measures it
// with the session's Handler_read counters); the range read reads at most
// four batches, and the first claim of a backlog reads that many, drops
// them and walks.
//
// Shard leases: a shard is held while its row in <table>_shards names the
// owner, under its epoch, and the owner's row in <table>_relays is live;
// the heartbeat (Balance) renews that one row. A claim locks its shard
// rows FOR UPDATE and only reads the relay row, so a heartbeat never waits
// for its own relay's claims (InnoDB has no lock mode that would let it
// renew a row a claim holds), while another relay's takeover, FOR UPDATE SKIP
// LOCKED on the shard rows, still passes over a shard a claim works in and
// then sees that claim's in-flight rows. (<table>_shards.lease_until is
// only the lease at the time a shard was taken.)
//
// A claim is one READ COMMITTED transaction: the owner's shard rows FOR
// UPDATE (fencing by owner and epoch, lease times from NOW(6) on the
// database), the expired in-flight rows of its shards FOR UPDATE (so a
// late Retry, Release or Extend of their old owner is either seen or
// fenced out, and a shard where one renewed a lease is left to it;
// no grace period is needed; only in the shards where a plain read found
// some, so a claim does not wait for the relay's own acks), the pending
// rows (while the relay keeps up, one range read of its lanes, sorted by
// id; after a claim that took and parked at least half its batch, the walk
// of each lane in id order), then the parking and the claim UPDATEs.
// Balance takes free or expired shards with SKIP LOCKED. InnoDB may pick
// one of them as a deadlock victim; it is run again (up to five times), as
// are settles.
//
// A relay's row in <table>_relays outlives its membership: each row
// records its relay's own lease (lease_for), and a heartbeat deletes a
// stopped relay's row only once it ended more than ten minutes or twice
// that lease ago, whichever is longer, so relays of one table may use
// different leases.
//
// MySQL has no LISTEN: Notify is an in-process signal after Enqueue and
// EnqueueTx through this Store (for EnqueueTx also once more shortly after,
// as the commit is the caller's). Relays in other processes poll. A relay
// that joins cannot ask the others over a notification for its share
// either: Rebalance, the read each relay makes every 500 ms for ended
// sessions, also tells a relay holding more than its share that a live
// one holds less, and its Balance revokes the surplus.
//
// Files by role: mysqlstore.go (the Store, Open, locks, errors), schema.go
// (migrations), enqueue.go (the producer's side), claim.go and settle.go
// (the relay's: row decoding, extend, ack, retry, bury, release), owned.go
// (ordering by ownership: Balance, Claim, parking), admin.go (the
// operator's: get, dead letters, purge, stats), backlog.go, notify.go, dsn.go.
package mysqlstore
