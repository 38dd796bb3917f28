package source

import (
	"context"
	"errors"

	outbox "github.com/outbox-go/outbox"
)

// Position is where a transaction ends in a source's log (a PostgreSQL
// LSN, a binlog offset). Positions grow in commit order.
type Position uint64

// Txn is one committed transaction: its events in the order it wrote them,
// and the Position that acknowledges it and every transaction before it.
// A Txn may carry no events (a source may report positions so that its
// log can advance).
type Txn struct {
	Pos    Position
	Events []outbox.Event
}

// Burial is an event that will not be delivered: out of attempts, or
// refused for good by the broker.
type Burial struct {
	Event    outbox.Event
	Pos      Position // the Position of its transaction
	Attempts int      // failed attempts, this one included
	Reason   string   // the last error: what failed and what to do
}

// Source is a stream of committed transactions.
type Source interface {
	// Next blocks until at least one more committed transaction is known
	// and returns the ones known, in commit order, or ctx's error. The
	// slice and its events belong to the caller.
	Next(ctx context.Context) ([]Txn, error)
	// Ack says that every event of every transaction up to and including
	// pos was delivered or buried: the source may forget them (and delete
	// their rows, advance its slot).
	Ack(ctx context.Context, pos Position) error
	// Bury records events as DEAD, with their reasons, where operators see
	// them (`outbox dead list`). The relay burials an event before it
	// acknowledges a Position past it.
	Bury(ctx context.Context, events []Burial) error
}

// ErrFenced is what a Source returns once another process took over its
// stream (its lease expired, or an operator moved it): the relay stops
// without acknowledging anything more.
var ErrFenced = errors.New("source: fenced: another process holds this source's lease now")
