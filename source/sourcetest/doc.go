// Package sourcetest is the conformance suite every source.Source must
// pass: what the relay relies on (the source package doc lists it),
// checked against a real database.
//
// A source's test builds a Suite whose New returns a Fixture over a fresh
// stream (its own table, slot, …), and calls Run. The suite checks:
//
//   - Committed only: a rolled-back transaction's events are never
//     returned, and an open one's not before it commits.
//   - Commit order: transactions committed one after another come back in
//     that order, each one's events in the order it wrote them, and
//     positions grow. With Suite.CommitOrder, also transactions that
//     committed in the other order than they began (a log's promise; a
//     poller hands out what it sees together in id order).
//   - Ack: acknowledging a position twice, or an older one, is harmless;
//     after a restart no acknowledged event comes back, and every
//     unacknowledged one does, with the same event id (at least once).
//   - Bury: a buried event is visible as DEAD, with its reason, where
//     operators look (Fixture.Dead), and is not delivered again.
//   - Fencing (a Fixture that implements Takeover): once another process
//     took the source's stream over, Bury refuses with source.ErrFenced
//     and writes nothing; Ack either refuses with ErrFenced or has nothing
//     to write.
//   - Next ends with the context's error when the context ends first.
package sourcetest
