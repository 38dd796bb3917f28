// Package pgcdc is a PostgreSQL logical replication source: it streams the
// outbox table's inserts (table mode) or pg_logical_emit_message records
// (table-less mode) from a replication slot with the pgoutput plugin
// (protocol 1), and implements source.Source, so the relay
// (relay.NewSource, `outbox relay --source pgcdc`) delivers them.
//
// Set-up: the server needs wal_level = logical (Start refuses anything
// else, naming the fix); the role needs REPLICATION and, for Setup, to own
// the table. Start runs Setup (publication on the table, <table>_cdc for
// the lease and the slot's history) and creates the slot when it is
// missing; `outbox migrate --cdc` does the same ahead of time.
//
// # What is delivered, and when
//
// The source buffers each transaction until its Commit record and hands
// committed transactions out in commit order; an aborted transaction is
// never seen (pgoutput sends nothing of it), and with protocol 1 the
// server decodes a transaction only once it committed, spilling large ones
// to disk. Rows are decoded through the Relation message (column
// positions), by the table contract's column names; a row that breaks the
// contract (headers that are not an object of strings, an empty topic, …)
// is buried DEAD with the reason, never a crash. An UPDATE that turns a row
// back to NEW (`outbox dead retry`) delivers it again.
//
// A transaction's Position is its commit's end LSN. Ack deletes the
// delivered rows (table mode; in batches, after the broker confirmed them)
// and only then lets the slot's confirmed flush LSN advance to it; so a
// crash replays at most what was not acknowledged, with the same event ids.
// With nothing outstanding, the source reports the server's sent position
// from its keepalives, and a heartbeat (pg_logical_emit_message(false,
// prefix||'hb', ”)) gives an idle database WAL to move past, so an idle
// slot retains no WAL. Lag reads pg_current_wal_lsn() - confirmed_flush_lsn;
// NewLagCollector exposes it as outbox_cdc_lag_bytes.
//
// # Burying
//
// Table mode: the row becomes DEAD with last_error, as the polling relay
// does, so `outbox dead list` shows it and `outbox dead retry` requeues
// it. Table-less mode: the event is inserted, DEAD, into <table>_dead, an
// outbox table of its own: `outbox dead list --table <table>_dead` shows
// it; a requeued one becomes NEW there and is delivered by a polling relay
// on that table (`outbox relay --table <table>_dead`).
//
// # Slot safety
//
// A slot that vanished (dropped behind the source's back) or was
// invalidated (wal_status lost) is detected when streaming (re)starts. In
// table mode the source creates a new slot with an exported snapshot and
// reads, in that snapshot, the rows still NEW: exactly those committed
// before the new slot's start, which the stream will not carry; they are
// delivered first, then streaming goes on. (The same happens when a slot is
// first created on a table that already holds rows.) Those rows are held in
// memory only by the process that created the slot, so <table>_cdc marks
// them (recover_lsn, set before the slot is created, cleared once they are
// acknowledged): a process that takes the slot over while the mark is set
// reads the NEW rows again, in a snapshot of its own, and delivers them
// before it streams. That read cannot tell the rows committed before the
// slot's start from later ones (a row carries no commit position), so every
// row still NEW then is delivered, and those committed after the slot's
// start come again from the stream, which replays from the slot's
// confirmed position: duplicates with the same event ids, at most the rows
// committed after the slot's start and not yet acknowledged when the
// takeover happens (the previous holder's unacknowledged window plus what
// was committed while nobody streamed). It costs only while the mark is
// set, that is when a process is taken over before the pre-slot rows were
// all acknowledged. In table-less mode the
// events live only in the WAL, so a lost slot cannot be recovered: Start
// fails with ErrSlotLost, naming `outbox cdc drop-slot --force`. DropSlot
// refuses while events are undelivered unless forced.
//
// # One streamer at a time
//
// A lease row per slot in <table>_cdc (owner, fencing epoch, expiry on the
// database clock, renewed every third of Config.LeaseFor). Other processes
// wait in Start and take over once it expired; the new holder terminates a
// stale walsender of the slot. Every write (the deletes of Ack, Bury, and
// that termination) locks the lease row and checks owner, epoch and expiry
// in the same transaction first, so a process that stalled past its lease
// changes nothing, and when it wakes and reconnects it cannot end the new
// holder's stream either; it stops with source.ErrFenced. (Starting to
// stream is not fenced: a stale process that gets the slot in the moment
// between the new holder's check and its START_REPLICATION is terminated by
// the new holder's retry, and confirms only what it delivered itself.)
//
// Relays that start at the same moment may run Setup together: Setup runs
// in a transaction that holds an advisory lock keyed on <table>_cdc, so
// they run one after the other, and a creation still lost to another
// process is retried, not an error. Setup takes no lock on an up-to-date
// <table>_cdc (it adds a missing column only, waiting at most 5s for the
// table's lock), so a long transaction on it does not queue Setup, nor the
// holder's lease renewals behind Setup. A relay that
// waits for the lease rides out a lost connection (the server restarted,
// its session terminated).
//
// The lost-slot path (wal_status lost) is tested on a real slot by making
// the source see the slot as invalidated (a test-only hook): making the
// server invalidate it means lowering max_slot_wal_keep_size, a setting
// of the whole server that would invalidate the other slots on it too.
//
// # Protocol 2 streaming
//
// Not enabled: with protocol 1 the server sends a transaction at its
// commit, which is what the source needs anyway (it delivers nothing
// before the commit). Streaming in-progress transactions would save the
// server's spill files for very large transactions but not change what is
// delivered.
package pgcdc
