package inbox

import (
	"context"
	"fmt"
)

// CheckVersion is the optional per-key ordering guard. Inside tx it
// compares version with the highest version applied so far for (consumer,
// key) and records version when it is higher. stale=true means an equal or
// newer version was applied before: skip the event's state change (and
// return nil from the handler, so the stale event is recorded as processed
// and not retried).
//
// Deduplication by event id already stops the same event twice. Use
// CheckVersion as well when a handler overwrites state with the event's
// content (an order's current status, a price, a read model row) and an
// older event can arrive after a newer one: competing consumers on a
// RabbitMQ queue, JetStream with MaxAckPending > 1 or several pull
// workers, broker redelivery of an earlier failure, or an operator
// requeueing a dead event. Handlers whose effects commute (adding points,
// appending to a log) need only deduplication.
//
// version must increase strictly per key: an aggregate version or sequence
// number carried in the payload works; so does the broker's sequence when
// all of a key's events share one ordered log (a Kafka partition offset,
// a JetStream stream sequence). The record commits or rolls back with tx,
// so a failed handler leaves the stored version unchanged.
//
// The state is one row per (consumer, key) in VersionsTable, kept until you
// delete it; Purge does not touch it. On PostgreSQL and MySQL a concurrent
// check of the same key waits for the other transaction, so two handlers
// never both apply versions out of order.
func (in *Inbox) CheckVersion(ctx context.Context, tx Execer, consumer, key string, version int64) (stale bool, err error) {
	if tx == nil {
		return false, fmt.Errorf("%w: CheckVersion needs the handler's transaction", ErrInvalidConfig)
	}
	if err := checkConsumer(consumer); err != nil {
		return false, err
	}
	if err := checkKey(key); err != nil {
		return false, err
	}
	what := fmt.Sprintf("check version %d of key %q", version, shorten(key))
	if in.dialect != MySQL {
		res, err := tx.ExecContext(ctx, in.stmts.versionUp, consumer, key, version)
		if err != nil {
			return false, in.wrapVersionError(what, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return false, fmt.Errorf("inbox: %s: %w", what, err)
		}
		return n == 0, nil
	}
	// MySQL has no conditional upsert whose row count survives the
	// driver's clientFoundRows option: insert if absent, else raise.
	res, err := tx.ExecContext(ctx, in.stmts.versionIns, consumer, key, version)
	if err != nil {
		return false, in.wrapVersionError(what, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, fmt.Errorf("inbox: %s: %w", what, err)
	} else if n == 1 {
		return false, nil
	}
	res, err = tx.ExecContext(ctx, in.stmts.versionUpd, version, consumer, key, version)
	if err != nil {
		return false, in.wrapVersionError(what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("inbox: %s: %w", what, err)
	}
	return n == 0, nil
}

func (in *Inbox) wrapVersionError(what string, err error) error {
	if isUndefinedTable(err) {
		return fmt.Errorf("inbox: %s in %s: %w: %w", what, in.versions, ErrNotMigrated, err)
	}
	return fmt.Errorf("inbox: %s in %s: %w", what, in.versions, err)
}
