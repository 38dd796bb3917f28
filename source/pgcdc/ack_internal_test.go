package pgcdc

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox/source"
)

// The server streams a commit as soon as its WAL is flushed, before the
// committing backend leaves the process array; meanwhile other snapshots
// still see the transaction as running. Ack must not delete (and let the
// slot pass) in that window, or the DELETE removes nothing and the rows
// stay NEW behind the slot for good. An open transaction whose rows are
// "streamed" models that window: Ack waits for it, then deletes its rows.
func TestAckWaitsForTheCommitToBeVisible(t *testing.T) {
	ctx, pool, table, drop := internalFixture(t, "cdc_ack_")
	s, err := New(pool, Config{Table: table, LeaseFor: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	drop(s.cfg)
	if err := Setup(ctx, pool, s.cfg); err != nil {
		t.Fatal(err)
	}
	if err := s.acquireLease(ctx); err != nil {
		t.Fatal(err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	var xid int64
	if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text::bigint % 4294967296").Scan(&xid); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	rows, err := tx.Query(ctx, "INSERT INTO "+pgx.Identifier{table}.Sanitize()+" (topic, event_key, event_type, payload) SELECT 't', 'k', 'T', 'x' FROM generate_series(1, 3) RETURNING id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	s.push(source.Txn{Pos: 100}, 100, uint32(xid), ids)

	acked := make(chan error, 1)
	go func() { acked <- s.Ack(ctx, 100) }()
	select {
	case err := <-acked:
		t.Fatalf("Ack returned (%v) while the transaction was still running: its DELETE could not see the rows", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-acked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Ack did not return within 20s of the commit")
	}
	var left int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d of %d acknowledged rows left in the table", left, len(ids))
	}
}
