// Package pgstore is the PostgreSQL store (pgx v5): it enqueues inside the
// caller's pgx.Tx or *sql.Tx (database/sql through pgx's stdlib driver, or any
// PostgreSQL driver), and gives the relay engine its claim/ack/retry seam.
//
// Claims are one round trip: an advisory transaction lock that serializes
// claims of one table (so two relays never hold events of one key at once)
// and a single UPDATE … FROM (SELECT … FOR UPDATE SKIP LOCKED) RETURNING.
// Acks are one DELETE (or one DELETE … RETURNING feeding an INSERT into the
// archive table when sent events are kept). Two small partial indexes cover
// only in-flight, dead and delayed rows, so ordinary inserts maintain just the
// primary key and the event_id unique index.
//
// With Config.Notify, every enqueue sends pg_notify on a channel the relay
// LISTENs to; a hint only, the relay keeps polling.
package pgstore
