// Package dispatch is the relay's per-key dispatcher, for a store's
// batches and a source's events alike: given a set of events (one claimed
// batch; for a source, the events that may go when a publish call could
// start) and, for each,
// the event it must wait for, it decides which events go to the broker in
// which publish call and when, and which are released untried.
//
// What it owns:
//
//   - Order per key. An event is published only after its predecessor was
//     confirmed: one in the same set (Set.PrevIn), or one outside it (in
//     an earlier set still in flight) whose outcome it awaits through a
//     Ticket (Set.Prev). On a broker that keeps a key's order within a
//     call (Features.Ordering OrderKey or OrderPartition) a key's later
//     events of the set go in the call of its first ready one, after it.
//   - Release chains. When a predecessor failed or was released, the
//     events that wait for it are released too, never sent, so they are
//     charged no attempt; so is everything not yet sent once Set.Stop says
//     no further call may start (a stop, a lost lease, an unreachable
//     broker).
//   - The calls. Dispatch is event-driven: when a call returns, the next
//     events of the keys it confirmed go at once in a new call, while the
//     set's other call is still in flight (at most Set.MaxCalls, default
//     2). Events ready together go in one call, in index order; on a
//     broker that keeps no order (OrderNone) a ready set found with no call
//     in flight is cut into MaxCalls calls, so that the keys' chains drift
//     apart instead of all waiting for the slowest ack of one call
//     (Set.NoCut keeps them in one call: a source's calls take what is
//     ready). A call carries at most Features.MaxInFlight events.
//
// What it does not own, and leaves to its caller's callbacks: the publish
// call itself (deadlines, hooks, the broker's in-flight window), what a
// failed result means (Set.Judge: retry, DEAD, release, a broker outage),
// where outcomes are written (a store, by lease; a source, by counting
// events off its transactions), and tickets' lifetimes across sets.
package dispatch
