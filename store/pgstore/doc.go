// Package pgstore is the PostgreSQL store (pgx v5; PostgreSQL 14 or newer):
// it enqueues inside the caller's pgx.Tx or *sql.Tx (database/sql through
// pgx's stdlib driver, or any PostgreSQL driver), or on the caller's
// pgx.Batch so the event rides the business statements' round trip
// (EnqueueInBatch), and gives the relay engine its claim/ack/retry seam.
//
// Claims are one round trip: an advisory transaction lock that serializes
// claims of one table (so two relays never hold events of one key at once),
// the takeover of expired claims, and one statement that reads the next free
// rows in id order and records them as one row of <table>_claims (owner,
// fencing epoch, lease expiry, the ids as ranges, the keys); that
// transaction commits, releasing the lock, before the claimed events are
// read back by the claim's ranges in the same round trip. The outbox rows
// are not written by a claim: their status column stays NEW while in flight,
// and Get and Stats report SENDING from the claim. Acks are one DELETE (or
// one DELETE … RETURNING feeding an INSERT into the archive table when sent
// events are kept) that also takes the ids out of the claim; a whole claim's
// ack walks the primary key once per range. One small partial index
// covers only dead and delayed rows, so ordinary inserts maintain just the
// primary key and the event_id unique index.
//
// Claims walk the primary key from its start, so the dead index entries of
// drained rows slow every claim until VACUUM removes them; a Store vacuums
// its table in the background after Config.VacuumAfter deleted rows instead
// of waiting up to a minute for autovacuum (vacuum.go).
//
// The table contract's cheap rules (a known status, a non-empty topic and
// event_type, a non-negative schema_version, headers a JSON object) are
// CHECKs on domains of the columns, so a producer's bad INSERT is refused at
// once: a table CHECK is prepared anew for every INSERT statement and cost a
// one-row enqueue several times more backend CPU than the domains do
// (schema.go, migration 6). The other rules are checked by the claim, which
// buries a row that breaks them DEAD with the reason.
//
// Enqueues send pg_notify on a channel the relay LISTENs to, at most one per
// Config.NotifyInterval per Store (PostgreSQL serializes notifying commits);
// a hint only: the relay keeps polling, and looks again a few milliseconds
// after each round that found events.
package pgstore
