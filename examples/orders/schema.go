package orders

import (
	"context"
	"fmt"
	"strings"

	"database/sql"
)

// Dialect is the SQL flavour of the business tables.
type Dialect string

// The dialects the example runs on.
const (
	Postgres Dialect = "postgres"
	MySQL    Dialect = "mysql"
	SQLite   Dialect = "sqlite"
)

// rebind turns ? placeholders into $n for PostgreSQL.
func (d Dialect) rebind(q string) string {
	if d != Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Migrate creates the business tables: orders and one table per consumer's
// effects, plus the delivery log the demo reads its duplicates from.
func Migrate(ctx context.Context, db *sql.DB, d Dialect) error {
	id := map[Dialect]string{
		Postgres: "BIGSERIAL PRIMARY KEY",
		MySQL:    "BIGINT AUTO_INCREMENT PRIMARY KEY",
		SQLite:   "INTEGER PRIMARY KEY AUTOINCREMENT",
	}[d]
	if id == "" {
		return fmt.Errorf("orders: unknown dialect %q", d)
	}
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS orders (
			id ` + id + `,
			customer VARCHAR(64) NOT NULL,
			amount_cents BIGINT NOT NULL,
			status VARCHAR(16) NOT NULL,
			paid_event_id VARCHAR(36))`,
		`CREATE TABLE IF NOT EXISTS points_ledger (order_id BIGINT PRIMARY KEY, customer VARCHAR(64) NOT NULL, points BIGINT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS shipments (order_id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS notifications (order_id BIGINT PRIMARY KEY, body VARCHAR(255) NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS deliveries (
			consumer VARCHAR(32) NOT NULL,
			event_id VARCHAR(36) NOT NULL,
			stream_seq BIGINT NOT NULL,
			num_delivered BIGINT NOT NULL,
			outcome VARCHAR(16) NOT NULL)`,
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("orders: migrate: %w", err)
		}
	}
	return nil
}

// Drop removes the business tables (for a fresh run on a shared database).
func Drop(ctx context.Context, db *sql.DB) error {
	for _, t := range []string{"orders", "points_ledger", "shipments", "notifications", "deliveries"} {
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
			return fmt.Errorf("orders: drop %s: %w", t, err)
		}
	}
	return nil
}
