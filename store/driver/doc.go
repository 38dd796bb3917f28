// Package driver is the relay engine's seam to a database: shard leases,
// claims, and the fenced state changes of claimed events, one method per
// statement. It is for the packages that implement a store (store/pgstore,
// store/mysqlstore, store/sqlitestore) and for the engine (relay), not for
// users: an application enqueues and operates through package store. The
// seam is unstable: it changes with the engine, without deprecation, and
// store/storetest changes with it.
//
// A store value implements both: store.Store for its users and Driver for
// the relay (Store names the pair). Its optional abilities (Notifier here,
// store.BacklogReader there) are found by type assertion.
//
// # How a claim keeps per-key order
//
// A store spreads its rows over a fixed number of shards, computed by the
// database from the row alone (so a plain-SQL INSERT needs no new column):
// a keyed row's shard is a hash of event_key, a keyless row's is derived
// from its id. Relays lease shards in the database (Balance) and claim only
// from shards they hold (Claim). One relay owns a key at a time, so it may
// claim a key's next events while the earlier ones are still in flight and
// order them in memory; a claim is never held back by the owner's own
// in-flight events.
//
// A keyed row is claimable when no earlier row of its key waits for a
// retry or a delayed AvailableAt, is DEAD (HoldDeadKeys), or is parked. A
// row that is not claimable for that reason is parked by the claim that
// meets it: it leaves the claim's index, so no later claim reads past it
// again. A key's parked rows are unparked when its blocking row moves on
// (acked, requeued, purged, or buried with HoldDeadKeys off), lowest ids
// first; Balance also unparks rows whose key holds nothing any more.
//
// In every store a row never delayed (next_attempt_at at most created_at)
// is due whatever the claim's clock says: the clock can be behind a row
// that the claim sees committed (a transaction's or statement's start
// before the row's writer began, or a clock stepped back), and a key's
// earlier row judged "not due" would let its later row be claimed first.
//
// # What differs by dialect
//
// The rules are the same in every store; how they are kept differs:
//
//	                PostgreSQL               MariaDB 10.6+                       SQLite
//	shards          64: hashtext(key) & 63,  64: CRC32(key) % 64, keyless        1 (one writer per file)
//	                keyless by id            CRC32(payload)+µs of created_at
//	                                         (AUTO_INCREMENT and event_id are
//	                                         refused in generated columns)
//	shard column    index expression         VIRTUAL generated columns           none
//	claim index     partial, per shard,      (lane, id): lane is the shard of    partial (id) of NEW,
//	                NEW and not parked       a NEW unparked row, else NULL       unparked rows
//	claim walk      Merge Append in id       a page per shard (UNION ALL), the   expired claims and NEW
//	                order under the LIMIT    lowest Limit ids of them all        rows merged in id order
//	leases held in  a claims table (ids)     the rows (status, lease_owner,      the rows
//	                                         lease_epoch, lease_until)
//	claim locks     shard rows FOR KEY       shard rows FOR UPDATE, expired      the write lock
//	                SHARE, an advisory lock  in-flight rows FOR UPDATE; takeover
//	                per owner                SKIP LOCKED; deadlocks retried
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
// # Fencing
//
// Each claim is recorded with its Lease (owner, epoch) and every Extend,
// Ack, Retry, Bury and Release checks it: a stale relay's write changes
// nothing and returns ErrLeaseLost. A shard changes hands only when its
// lease expired or its owner released it; its new owner does not claim
// from it while any live claim of another owner still holds events of
// that shard. Lease times come from the database clock.
//
// # The implementers' kit
//
// ScreenClaim, CheckRow and DecodeHeaders apply the table contract to the
// rows a claim read (a row that breaks it is buried DEAD with its reason,
// and holds only its own key); EncodeHeaders and CleanError write the
// columns; Wakeups fans a commit signal out to Notify's channels.
package driver
