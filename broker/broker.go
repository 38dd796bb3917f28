package broker

import (
	"context"
	"errors"
	"fmt"

	outbox "github.com/outbox-go/outbox"
)

// Broker publishes events and reports the broker's confirmation of each.
type Broker interface {
	// Publish sends events, in slice order, and waits until the broker has
	// confirmed or refused each one, or ctx ends. It returns one error per
	// event (nil = confirmed by the broker); len(result) == len(events).
	// It must not return before every event has a result, and must not
	// report nil for an event the broker did not confirm.
	Publish(ctx context.Context, events []outbox.Event) []error
	// Close flushes what is in flight and releases the connection. Safe to
	// call more than once.
	Close(ctx context.Context) error
}

// ErrUnavailable marks a result that says nothing about the event: the
// broker as a whole could not be reached (not connected, closed). The relay
// gives such events back without counting an attempt and backs off, so an
// outage of any length never makes events DEAD. Adapters wrap it with %w.
var ErrUnavailable = errors.New("broker unavailable")

// ErrRefused marks a connection the broker answered and refused: wrong
// credentials, no permission, an unknown vhost. Retrying with the same
// settings cannot succeed, so `outbox relay` exits at once naming the fix
// instead of waiting for the broker. Adapters' Dial wraps it with %w.
var ErrRefused = errors.New("refused by the broker")

// Refused returns err marked with ErrRefused, its message unchanged.
func Refused(err error) error { return refused{err} }

type refused struct{ err error }

func (r refused) Error() string   { return r.err.Error() }
func (r refused) Unwrap() []error { return []error{r.err, ErrRefused} }

// ErrNotAttempted marks a result for an event the adapter held back, or
// that failed only because an earlier event of the same call failed ahead
// of it in an ordered unit (a Kafka partition whose idempotent producer
// fails every record buffered behind a refused one). Nothing is wrong with
// the event itself: the relay gives it back without counting an attempt,
// so it cannot go DEAD untried behind a poison neighbour. It is never
// Permanent. Adapters wrap it with %w.
var ErrNotAttempted = errors.New("not attempted: an earlier event of the same ordered unit failed")

// ErrPermanent marks an error that retrying will not fix. Test with
// IsPermanent.
var ErrPermanent = errors.New("permanent")

type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() []error {
	return []error{p.err, ErrPermanent}
}

// Permanent wraps err so the relay buries the event at once instead of
// retrying it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// Permanentf is Permanent(fmt.Errorf(format, args...)).
func Permanentf(format string, args ...any) error {
	return Permanent(fmt.Errorf(format, args...))
}

// IsPermanent reports whether err was marked Permanent.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

// Fill returns a result slice of n copies of err: for failures that hit the
// whole batch (no connection, ctx ended).
func Fill(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// Checker is an optional ability: the adapter can tell at enqueue whether
// it will be able to deliver a message (the broker's size limit, its topic
// syntax), so that the producer hears of a message the broker would refuse
// while it can still fix it, instead of the event going DEAD at the relay.
// Use it as the store's check:
//
//	store.Options{Check: b.Check} // b is a natsbroker.Broker
//
// Check sees the message as the store will write it (EventID set,
// SchemaVersion at least 1, ContentType set) after outbox.Validate passed
// it, and returns nil or a *outbox.ValidationError naming the field and
// the fix. It must be safe for concurrent use. The adapter refuses the same
// events at publish (as Permanent), for rows that did not pass through it.
type Checker interface {
	Check(outbox.Message) error
}

// Headers the relay and adapters set for consumers, in the CloudEvents
// vocabulary. Adapters map them to their transport's binding.
const (
	SpecVersion = "1.0"
	// SourceDefault is the CloudEvents source when a relay names none.
	SourceDefault = "outbox"
)
