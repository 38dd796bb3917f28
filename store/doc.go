// Package store is the seam a database dialect implements so that the relay
// engine can drive it: migrate, enqueue (alone or inside the caller's
// transaction), claim a batch under a lease, acknowledge, retry, bury, and the
// operator's tools (dead letters, purge, stats).
//
// Every state change a relay makes is a compare-and-swap on the lease
// (owner, epoch) it got from Claim, and lease times come from the database
// clock, so a relay that was paused past its lease changes nothing.
//
// Per-key order across many relays: Claim never returns an event whose key
// has an event in flight under a live lease, an earlier event waiting for a
// retry or a delayed AvailableAt, or (when HoldDeadKeys is set) an earlier
// DEAD event. Claims of one table are serialized by a database lock held only
// for the claim statement, so two relays can never claim events of one key at
// the same time; publishing and acknowledging run in parallel.
//
// A row that breaks the table contract (written with plain SQL: headers that
// are not a JSON object of strings, an empty topic or event_type, control
// characters, a negative schema_version) never fails a claim: the claim that
// takes it buries it DEAD with a one-line reason (Screen, CheckRow,
// DecodeHeaders), so it shows in ListDead and Stats and holds only its own
// key. The stores
// refuse the rules they can check cheaply at INSERT.
//
// Implementations: store/pgstore, store/mysqlstore, store/sqlitestore. Each
// passes the conformance suite in store/storetest.
package store
