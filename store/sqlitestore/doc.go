// Package sqlitestore is the embedded default store: SQLite through
// modernc.org/sqlite (pure Go, no cgo). One file holds the application's
// tables and the outbox, so Enqueue joins the caller's *sql.Tx exactly as on
// PostgreSQL, and no server is needed: `outbox migrate --db
// sqlite:app.db` and the relay runs in the same process or beside it.
//
// The SQL is written by hand, like pgstore's, because SQLite differs where
// the outbox cares:
//
//   - One writer at a time. Every write the store makes is a single
//     statement or runs inside BEGIN IMMEDIATE, so it takes the write lock
//     before it reads and waits for it under the busy timeout; a deferred
//     transaction that reads first and then writes would fail with
//     SQLITE_BUSY without waiting once another writer got in between. The
//     write lock also serializes claims, which is what keeps two relays from
//     holding events of one key at once (PostgreSQL needs an advisory lock
//     for that). A claim is one UPDATE … WHERE id IN (SELECT … ORDER BY id
//     LIMIT n) RETURNING.
//   - Times are INTEGER unix microseconds from SQLite's clock (millisecond
//     resolution), written by column defaults and by the statements
//     themselves, so leases never depend on the relay's clock.
//   - ids come from INTEGER PRIMARY KEY AUTOINCREMENT: without it SQLite
//     reuses the id of the newest row once it is deleted, which is what an
//     ack does, and the archive and operators would see two events under one
//     id.
//   - Lists of ids and per-row errors and delays are bound as one JSON array
//     and read with json_each, so no statement runs into SQLite's limit on
//     bound variables; multi-row INSERTs are cut at 3000 rows for the same
//     reason.
//   - payload is a BLOB read back with CAST(payload AS BLOB), so a producer
//     that inserts a JSON payload as TEXT still gets its bytes delivered.
//
// Open takes sqlite:path/to/file.db (or sqlite://path, or sqlite::memory:)
// and sets WAL, a 5 s busy timeout, foreign keys and immediate transactions;
// see DSN. New wraps a *sql.DB the caller opened. The in-process Notifier
// wakes relays of the same process after each enqueue; there is no
// cross-process wake-up, so relays in other processes rely on polling.
package sqlitestore
