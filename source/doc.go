// Package source is the seam between a log of committed outbox events and
// the relay that delivers them (relay.NewSource). It holds the seam only:
// the Source interface, its Txn, Position and Burial values, and
// ErrFenced. Its implementations live below it: source/pgcdc (PostgreSQL
// logical replication, table and table-less modes) and the MySQL binlog
// source; source/sourcetest is the conformance suite each of them passes.
// How the relay reads a Source (order per key, retries, DEAD events, the
// Positions it acknowledges) is the relay package's business, described
// in its doc.
//
// What a Source must promise:
//
//   - Committed only. Next returns a transaction only once it committed; a
//     rolled-back or still open transaction is never returned.
//   - Commit order. Transactions come back in the order they committed
//     (not the order they began, nor their rows' ids), each one's events
//     in the order it wrote them. The relay's order per key is this order.
//   - Positions that grow. Each Txn's Position is larger than the one
//     before it; acknowledging a Position stands for every transaction up
//     to it. A Txn may carry no events, so that a quiet log still
//     advances.
//   - Ack. The relay acknowledges a Position only once every event up to
//     it was confirmed by the broker or buried. The source may then forget
//     those events for good (delete their rows, advance its slot), and
//     only then: after a crash or restart every event not acknowledged
//     comes back, with the same event id (at least once). Acknowledging a
//     Position twice, or an older one, is harmless.
//   - Bury visibility. Bury records events as DEAD, with their reasons,
//     where operators look (`outbox dead list`), before the relay
//     acknowledges a Position past them; a buried event is not delivered
//     again unless an operator requeues it.
//   - Fencing. A source that can be taken over (its lease expired, an
//     operator moved it) returns ErrFenced from Next, Ack or Bury once
//     another process holds its stream, and writes nothing more; the relay
//     then stops and Run returns the error.
//   - Cancellation. Next returns the context's error when the context ends
//     first.
package source
