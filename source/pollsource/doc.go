// Package pollsource is the polling read path as a source.Source: Next
// claims batches from a store.Store under a lease of their own (the
// store's fencing: every write names the lease's owner and epoch), Ack
// settles the claimed events up to a position, and Park buries an event
// DEAD with its reason, where `outbox dead list` shows it.
//
// Each claimed event is a Txn of its own, with a Position this Source
// numbers (1, 2, … in claim order; positions mean nothing across
// restarts: a new Source claims afresh what the store still holds). The
// store decides what a claim may take: an event whose key has an earlier
// event in a live claim (this Source's own included) is not handed out
// until that one is settled, so a key's events come out one claim after
// another, in id order, and the delivery loop's per-key order holds.
//
// While events are held (in flight, or waiting in the loop for a retry),
// their leases are renewed every third of Config.LeaseFor. A lease the
// store refuses (another process took the events over after this one
// stalled), or one that could not be renewed before it ran out, is lost:
// Ack and Park of its events return source.ErrFenced and write nothing, and
// the successor delivers them (at least once, with the same event ids).
//
// Close gives back (store.Release) what was claimed and not yet settled,
// so that a successor need not wait for the leases to run out.
package pollsource
