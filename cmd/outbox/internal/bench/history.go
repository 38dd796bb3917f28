package bench

import (
	"context"
	"database/sql"
	"fmt"
)

// seedHistory writes what a table carries after months in production before
// a drain: archived events (the archive table that --keep-sent fills) and
// DEAD rows in the outbox table, on keys the drain does not use. The rows
// are written in one INSERT … SELECT each, from the database's own number
// source, so a million of them take seconds, not a million round trips.
// Archived ids are negative: the archive keeps each event's outbox id, and
// the drain's own events archive beside them.
func seedHistory(ctx context.Context, db *sql.DB, dialect, table string, archived, dead, payload int) error {
	if archived <= 0 && dead <= 0 {
		return nil
	}
	numbers, uuid := "", ""
	switch dialect {
	case "postgres":
		numbers, uuid = "SELECT g AS n FROM generate_series(1, %d) g", "gen_random_uuid()"
	case "mysql":
		// MariaDB's Sequence engine: seq_1_to_N is a table of 1 … N
		numbers, uuid = "SELECT seq AS n FROM seq_1_to_%d", "UUID()"
	case "sqlite":
		numbers, uuid = "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < %d) SELECT n FROM s", "lower(hex(randomblob(16)))"
	default:
		return fmt.Errorf("bench: history: no seeding for the %s dialect", dialect)
	}
	pad := fmt.Sprintf("'%0*d'", max(payload, 1), 0)
	if dialect == "postgres" {
		pad += "::bytea"
	}
	const archiveCols = "id, event_id, topic, event_key, event_type, aggregate_type, schema_version, payload, content_type, headers, status, attempts, next_attempt_at, last_error, lease_owner, lease_epoch, created_at, sent_at"
	if archived > 0 {
		q := "INSERT INTO " + table + "_archive (" + archiveCols + ") SELECT -n, " + uuid + ", 'history', 'old-1', 'OrderPaid', '', 1, " + pad +
			", 'application/json', '{}', 'SENT', 1, CURRENT_TIMESTAMP, '', '', 0, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP FROM (" + fmt.Sprintf(numbers, archived) + ") nums"
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("bench: history: writing %d archived events: %w", archived, err)
		}
	}
	if dead > 0 {
		q := "INSERT INTO " + table + " (topic, event_key, event_type, payload, status, attempts, last_error) SELECT 'history', 'dead-1', 'OrderPaid', " + pad +
			", 'DEAD', 5, 'bench: a dead letter of the history' FROM (" + fmt.Sprintf(numbers, dead) + ") nums"
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("bench: history: writing %d DEAD rows: %w", dead, err)
		}
	}
	if dialect == "postgres" {
		// what autovacuum would have done long since: statistics that
		// know the table is not empty
		if _, err := db.ExecContext(ctx, "ANALYZE "+table+", "+table+"_archive"); err != nil {
			return fmt.Errorf("bench: history: %w", err)
		}
	}
	return nil
}
