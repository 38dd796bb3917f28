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
// characters, a negative schema_version, a time that is no time such as
// 'infinity' or SQLite text in an INTEGER column) never fails a claim or a
// read: the claim that takes it buries it DEAD with a one-line reason naming
// the column (ScreenClaim, CheckRow, DecodeHeaders), so it shows in ListDead
// and Stats and holds only its own key; a row due at no time, or a year or
// more ahead, is counted in Stats.HeldForGood. The stores refuse the rules
// they can check cheaply at INSERT.
//
// Reads cost what they show: ListDead returns a payload's first
// PreviewBytes and its size; Get the whole; CopyPayload streams it.
//
// Ordering by ownership (Owned, owned.go) has the same rules in every
// dialect; what differs:
//
//	                PostgreSQL               MariaDB 10.6+                       SQLite
//	shards          64: hashtext(key) & 63,  64: CRC32(key) % 64, keyless        1 (one writer per file)
//	                keyless by id            CRC32(payload)+µs of created_at
//	                                         (AUTO_INCREMENT and event_id are
//	                                         refused in generated columns)
//	shard column    index expression         VIRTUAL generated columns           none
//	claim index     partial, per shard,      (lane, id): lane is the shard of    partial (id) of NEW,
//	                NEW and not parked       a NEW unparked row, else NULL       unparked rows
//	claim walk      Merge Append in id       a page per shard (UNION ALL), the   one range in id order
//	                order under the LIMIT    lowest Limit ids of them all
//	leases held in  a claims table (ids)     the rows (status, lease_owner,      the rows
//	                                         lease_epoch, lease_until)
//	claim locks     shard rows FOR UPDATE,   shard rows FOR UPDATE, expired      the write lock
//	                advisory lock shared     in-flight rows FOR UPDATE; takeover
//	                with exclusion claims    SKIP LOCKED; deadlocks retried
//	clock           now(): the claim         NOW(6): each statement's start      julianday('now'), ms
//	                transaction's start
//
// In every dialect a row never delayed (next_attempt_at at most
// created_at) is due whatever the claim's clock says: the clock can be
// behind a row that the claim sees committed (a transaction's or
// statement's start before the row's writer began, or a clock stepped
// back), and a key's earlier row judged "not due" would let its later row
// be claimed first.
//
// Implementations: store/pgstore, store/mysqlstore, store/sqlitestore. Each
// passes the conformance suite in store/storetest.
package store
