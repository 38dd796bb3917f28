package pgcdc

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
)

// PgxExecer is what Emitter.Enqueue needs: pgx.Tx has it (and so do
// *pgx.Conn and *pgxpool.Pool, but only a transaction makes the event
// atomic with the business change).
type PgxExecer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Emitter writes table-less events: pg_logical_emit_message(true, Prefix,
// record) in the caller's transaction. The event exists only in the WAL: it
// commits or rolls back with the transaction, and the table-less Source
// with the same Prefix delivers it. Nothing to delete, no table growth.
type Emitter struct {
	// Prefix is the logical message prefix; default "outbox". The Source's
	// Config.Prefix must be the same.
	Prefix string
	// Limits bound the messages (outbox.Validate); zero: the defaults.
	Limits outbox.Limits
}

// EnqueueMessage is Emitter{}.Enqueue: table-less events with the default
// prefix, in the caller's pgx transaction.
func EnqueueMessage(ctx context.Context, tx PgxExecer, msgs ...outbox.Message) error {
	return Emitter{}.Enqueue(ctx, tx, msgs...)
}

// Enqueue writes msgs in tx, in one statement. Validation comes first; on
// a validation error nothing is sent and tx stays usable.
func (e Emitter) Enqueue(ctx context.Context, tx PgxExecer, msgs ...outbox.Message) error {
	stmt, args, err := e.statement(msgs)
	if err != nil || stmt == "" {
		return err
	}
	if _, err := tx.Exec(ctx, stmt, args...); err != nil {
		return fmt.Errorf("pgcdc: emitting %d events: %w", len(msgs), err)
	}
	return nil
}

// EnqueueTx is Enqueue for database/sql: *sql.Tx (through pgx's stdlib
// driver, or lib/pq).
func (e Emitter) EnqueueTx(ctx context.Context, tx store.Execer, msgs ...outbox.Message) error {
	stmt, args, err := e.statement(msgs)
	if err != nil || stmt == "" {
		return err
	}
	if _, err := tx.ExecContext(ctx, stmt, args...); err != nil {
		return fmt.Errorf("pgcdc: emitting %d events: %w", len(msgs), err)
	}
	return nil
}

// statement builds one SELECT emitting every message in order (a select
// list is evaluated left to right).
func (e Emitter) statement(msgs []outbox.Message) (string, []any, error) {
	if len(msgs) == 0 {
		return "", nil, nil
	}
	if err := outbox.Validate(e.Limits, msgs...); err != nil {
		return "", nil, err
	}
	prefix := e.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	args := make([]any, 0, len(msgs)+1)
	args = append(args, prefix)
	for i := range msgs {
		rec, err := encodeMessage(msgs[i].Normalized())
		if err != nil {
			return "", nil, err
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("pg_logical_emit_message(true, $1::text, $")
		b.WriteString(strconv.Itoa(i + 2))
		b.WriteString("::bytea)")
		args = append(args, rec)
	}
	return b.String(), args, nil
}
