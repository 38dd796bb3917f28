package broker

import (
	"context"

	outbox "github.com/outbox-go/outbox"
)

// Ordering is what a broker promises about the order of one adapter's
// messages when a publish fails part-way, the unit within which it keeps
// that order. The relay pipelines a key's events as far as the unit allows
// and no further.
type Ordering int

// The ordering units, weakest first.
const (
	// OrderNone promises nothing once an event fails: a later event of the
	// same key may be stored although an earlier one was not. The relay
	// sends a key's next event only after the previous one was confirmed
	// (one wave per position of a key in a batch).
	OrderNone Ordering = iota
	// OrderKey: within one Publish call, the events of a key are stored in
	// slice order, and once one of them fails no later event of that key
	// in the call is confirmed. The relay sends all of a key's events of a
	// batch in one call.
	OrderKey
	// OrderPartition is OrderKey for brokers whose keys map onto ordered
	// partitions (Kafka's idempotent producer): a failure also fails the
	// later events of the same partition, which the adapter reports as
	// not attempted.
	OrderPartition
)

// String names the unit as the docs do.
func (o Ordering) String() string {
	switch o {
	case OrderKey:
		return "key"
	case OrderPartition:
		return "partition"
	default:
		return "none"
	}
}

// Features are what an adapter declares about its broker: the ordering
// unit and the limits the relay and enqueue validation must respect.
type Features struct {
	// Ordering is the unit within which the broker keeps order after a
	// failure; the zero value, OrderNone, promises nothing.
	Ordering Ordering
	// MaxMessage is the largest message the broker accepts, payload and
	// headers together, in bytes; 0 means the adapter does not know.
	MaxMessage int
	// MaxInFlight bounds the events one adapter should have in flight at
	// once, across concurrent Publish calls; 0 means no bound of its own.
	MaxInFlight int
}

// Describer is an optional ability: an adapter that declares its Features.
type Describer interface {
	Features() Features
}

// FeaturesOf returns b's declared Features; an adapter that declares
// nothing gets the zero Features (no ordering promise, no known limits).
func FeaturesOf(b Broker) Features {
	if d, ok := b.(Describer); ok {
		return d.Features()
	}
	return Features{}
}

// Result is the broker's answer for one event: nil Err means confirmed,
// with whatever the broker said about where it stored it.
type Result struct {
	Err error
	// Stream and Sequence: JetStream's stream and stream sequence, a Redis
	// stream and its entry id's sequence part, …; zero when not known.
	Stream   string
	Sequence uint64
	// Partition and Offset: Kafka's; Offset is -1 when not known.
	Partition int32
	Offset    int64
	// ID is the broker's own id of the stored message where the numbers
	// above cannot hold it: a Redis stream entry id ("1718000000000-0");
	// "" when not known.
	ID string
	// Duplicate: the broker recognised the event id and did not store it
	// again (JetStream's duplicate window); it was confirmed.
	Duplicate bool
}

// ResultPublisher is an optional ability: publishing with the broker's
// metadata for each event. PublishResults obeys Publish's contract (one
// result per event, none nil-error unless confirmed).
type ResultPublisher interface {
	PublishResults(ctx context.Context, events []outbox.Event) []Result
}

// PublishResults publishes events through b and returns a Result per
// event: b's own when it is a ResultPublisher, else Publish's errors with
// no metadata (Offset -1).
func PublishResults(ctx context.Context, b Broker, events []outbox.Event) []Result {
	if rp, ok := b.(ResultPublisher); ok {
		return rp.PublishResults(ctx, events)
	}
	errs := b.Publish(ctx, events)
	out := make([]Result, len(errs))
	for i, err := range errs {
		out[i] = Result{Err: err, Offset: -1}
	}
	return out
}
