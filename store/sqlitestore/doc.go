// Package sqlitestore is the embedded default store: SQLite through
// modernc.org/sqlite (pure Go, no cgo). One file holds the application's
// tables and the outbox, so EnqueueTx joins the caller's *sql.Tx exactly as
// on PostgreSQL, and no server is needed:
//
//	outbox migrate --db sqlite:app.db
//
// Open takes sqlite:path/to/file.db (also sqlite://path/to/file.db,
// sqlite:///abs/path.db and sqlite::memory:) and sets WAL, a 5 s busy
// timeout, foreign keys and immediate transactions; see DSN. New wraps a
// *sql.DB the caller opened.
//
// The SQL is written by hand, like pgstore's, because SQLite differs where
// an outbox cares:
//
//   - One writer at a time. Every write the store makes is one statement
//     (which takes the write lock before it reads anything) or a
//     transaction whose first statement writes, or BEGIN IMMEDIATE; none
//     has to upgrade a read lock, which SQLite refuses with SQLITE_BUSY
//     without waiting. The store's own writers also queue in Go, one at a
//     time per *sql.DB: SQLite's busy timeout is a sleep-and-retry, not a
//     queue, and under steady load (eight relays claiming and acking) some
//     writers starve until it runs out.
//   - A claim reads its candidates first without the write lock (a WAL
//     read blocks no writer), then claims them with one UPDATE … WHERE id
//     IN (candidates still claimable) RETURNING that applies every rule
//     again under the lock. Relays scanning an outbox whose keys are all
//     held therefore never hold up the acks that free them; ids are
//     assigned under the write lock, so no earlier event of a key can
//     appear between the read and the update. Claims of one Store take
//     turns, so relays of one process do not race for the same candidates.
//   - Times are INTEGER unix microseconds from SQLite's clock (millisecond
//     resolution), written by column defaults and by the statements
//     themselves, so leases never depend on the relay's clock.
//   - ids come from INTEGER PRIMARY KEY AUTOINCREMENT: without it SQLite
//     hands out the id of the newest row again once it is deleted, which
//     is what an ack does; the archive's primary key would then refuse the
//     next SENT copy, and operators would see two events under one id.
//   - event_id defaults to a random UUID built from randomblob, so the plain
//     INSERT of the table contract works from any language.
//   - payload is a BLOB read back with CAST(payload AS BLOB), so a producer
//     that inserts its JSON as TEXT still has its bytes delivered.
//   - Lists of ids and per-row errors and delays are bound as one JSON array
//     and read with json_each, so no statement runs into SQLite's limit on
//     bound variables; multi-row INSERTs stop at 3000 rows for the same
//     reason. Statements are prepared once and kept: compiling them costs
//     SQLite more than running them.
//   - The schema's CHECKs refuse an unknown status and headers that are not
//     JSON at INSERT; the rest of the table contract is checked by the claim,
//     which buries a row that breaks it DEAD with the reason (SQLite cannot
//     add a CHECK to an existing table). Type affinity keeps text written
//     into schema_version as text: the claim reads it as it is and buries
//     the row rather than failing.
//
// Ordering by ownership (store/driver) has one shard here, where
// PostgreSQL and MariaDB have 64: SQLite has one writer and is embedded,
// so spreading keys over shards would buy no concurrency. Balance gives
// the shard to one relay at a time; the others wait and take it over when
// the holder leaves or its lease runs out. The lease is the only bound on
// a dead holder here: SQLite has no sessions for another process to see
// end (a file lock would be held by every connection of the process, and
// one process may run several relays), so it does not implement
// driver.Sessions, and a SIGKILLed relay's shard waits out its lease (a
// shorter --lease shortens it). A claim walks its candidates with plain
// reads (nothing while the previous holder has a live claim), then takes
// them in one short write transaction (shard and epoch checked again,
// parking, the update); see owned.go for the rules.
//
// Notify wakes relays after this Store's Enqueue at once, and after commits
// by anyone else (a caller's transaction, another process, a plain INSERT)
// within about 25 ms, by watching PRAGMA data_version while someone listens.
package sqlitestore
