package torture

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/outbox-go/outbox/store/pgstore"
)

// tables names the run's tables, all derived from the outbox table's name so
// one prefix finds (and drops) everything a run created.
type tables struct {
	dialect string // postgres, mysql, sqlite
	outbox  string
}

func (t tables) agg() string     { return t.outbox + "_agg" }
func (t tables) ledger() string  { return t.outbox + "_ledger" }
func (t tables) history() string { return t.outbox + "_history" }
func (t tables) applied() string { return t.outbox + "_applied" }
func (t tables) inbox() string   { return t.outbox + "_inbox" }
func (t tables) stale() string   { return t.outbox + "_stale" }
func (t tables) fence() string   { return t.outbox + "_fence" }

// claimlog is the fencing probe's log of claim rows (PostgreSQL).
func (t tables) claimlog() string { return t.outbox + "_claimlog" }

// rebind turns ? placeholders into $n for PostgreSQL.
func (t tables) rebind(q string) string {
	if t.dialect != "postgres" {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// create makes the workload's tables and keys aggregates at version 0.
func (t tables) create(ctx context.Context, db *sql.DB, keys int) error {
	engine := ""
	if t.dialect == "mysql" {
		engine = " ENGINE=InnoDB"
	}
	stmts := []string{
		"CREATE TABLE " + t.agg() + " (id VARCHAR(64) NOT NULL PRIMARY KEY, version BIGINT NOT NULL)" + engine,
		"CREATE TABLE " + t.ledger() + " (event_id VARCHAR(64) NOT NULL PRIMARY KEY, agg_id VARCHAR(64) NOT NULL, version BIGINT NOT NULL, hash VARCHAR(64) NOT NULL)" + engine,
		"CREATE TABLE " + t.history() + ` (n BIGINT NOT NULL PRIMARY KEY, event_id VARCHAR(64) NOT NULL, event_key VARCHAR(255) NOT NULL,
			agg_id VARCHAR(64) NOT NULL, version BIGINT NOT NULL, hash VARCHAR(64) NOT NULL, stream_seq BIGINT NOT NULL,
			num_delivered BIGINT NOT NULL, outcome VARCHAR(16) NOT NULL, at_ms BIGINT NOT NULL)` + engine,
		// No key: a second row for an event is the inbox failing, and the
		// checker counts it instead of the insert failing forever.
		"CREATE TABLE " + t.applied() + " (event_id VARCHAR(64) NOT NULL, agg_id VARCHAR(64) NOT NULL, version BIGINT NOT NULL)" + engine,
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("torture: create tables: %w", err)
		}
	}
	var b strings.Builder
	b.WriteString("INSERT INTO " + t.agg() + " (id, version) VALUES ")
	for i := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "('%s', 0)", aggID(i))
	}
	if _, err := db.ExecContext(ctx, b.String()); err != nil {
		return fmt.Errorf("torture: create aggregates: %w", err)
	}
	return nil
}

func aggID(i int) string { return fmt.Sprintf("agg-%03d", i) }

// installFence adds, on PostgreSQL, a trigger that records every change to
// an outbox row made by a relay session (application_name = its lease
// owner, prefix-relay-…) that did not hold the row's claim: a stale relay
// acknowledging, retrying or releasing what it no longer owns.
//
// pgstore records claims per batch in <table>_claims and changes a row only
// in a statement that also locks and updates its own claim row, which
// must list the row. A second trigger logs every claim row's old value per
// transaction (<table>_claimlog) before it changes, so the probe accepts a
// write when, in the same transaction, the writer changed a claim of its
// own that held the row, or the row is still in a claim of the writer (a
// store that changes rows without touching its claim). An UPDATE that
// changes nothing but parked (engine v2 parking a row behind its key's
// failed one, or unparking it, on rows no claim holds) is not a
// settlement and is not checked. Anything else is a stale write.
func (t tables) installFence(ctx context.Context, db *sql.DB, prefix string) error {
	if t.dialect != "postgres" {
		return nil
	}
	claims, claimlog := t.outbox+"_claims", t.claimlog()
	stmts := []string{
		"CREATE TABLE " + t.stale() + " (id BIGINT NOT NULL, op TEXT NOT NULL, holder TEXT NOT NULL, writer TEXT NOT NULL, at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())",
		"CREATE TABLE " + claimlog + " (tx BIGINT NOT NULL, owner TEXT NOT NULL, ids INT8MULTIRANGE NOT NULL)",
		`CREATE FUNCTION ` + claimlog + `() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO ` + claimlog + ` (tx, owner, ids) VALUES (txid_current(), OLD.owner, OLD.ids);
	IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
	RETURN NEW;
END $$`,
		"CREATE TRIGGER " + claimlog + " BEFORE UPDATE OR DELETE ON " + claims + " FOR EACH ROW EXECUTE FUNCTION " + claimlog + "()",
		`CREATE FUNCTION ` + t.fence() + `() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE app text := coalesce(current_setting('application_name', true), '');
BEGIN
	-- Parking and unparking (engine v2) change only parked, on rows no
	-- claim holds: a cache of the hold rule, not a settlement.
	IF TG_OP = 'UPDATE' AND (to_jsonb(OLD) - 'parked') = (to_jsonb(NEW) - 'parked') THEN
		RETURN NULL;
	END IF;
	IF left(app, ` + fmt.Sprint(len(prefix)+7) + `) = '` + prefix + `-relay-'
	   AND NOT EXISTS (SELECT 1 FROM ` + claimlog + ` WHERE tx = txid_current() AND owner = app AND OLD.id <@ ids)
	   AND NOT EXISTS (SELECT 1 FROM ` + claims + ` WHERE owner = app AND OLD.id <@ ids) THEN
		INSERT INTO ` + t.stale() + ` (id, op, holder, writer)
		VALUES (OLD.id, TG_OP, coalesce((SELECT owner FROM ` + claims + ` WHERE OLD.id <@ ids LIMIT 1), ''), app);
	END IF;
	RETURN NULL;
END $$`,
		"CREATE TRIGGER " + t.fence() + " AFTER UPDATE OR DELETE ON " + t.outbox + " FOR EACH ROW EXECUTE FUNCTION " + t.fence() + "()",
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("torture: install the fencing probe: %w", err)
		}
	}
	return nil
}

// drop removes everything the run created.
func (t tables) drop(ctx context.Context, db *sql.DB) {
	for _, n := range []string{t.outbox, t.outbox + "_archive", t.outbox + "_migrations", t.outbox + "_claims", t.outbox + "_lock",
		t.agg(), t.ledger(), t.history(), t.applied(), t.inbox(), t.inbox() + "_versions", t.stale(), t.claimlog()} {
		_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+n)
	}
	if t.dialect == "postgres" {
		for _, d := range pgstore.DomainNames(t.outbox) {
			_, _ = db.ExecContext(ctx, "DROP DOMAIN IF EXISTS "+d)
		}
		_, _ = db.ExecContext(ctx, "DROP FUNCTION IF EXISTS "+t.fence()+"()")
		_, _ = db.ExecContext(ctx, "DROP FUNCTION IF EXISTS "+t.claimlog()+"()")
	}
}

// readLedger returns the committed set.
func (t tables) readLedger(ctx context.Context, db *sql.DB) ([]LedgerRow, error) {
	rows, err := db.QueryContext(ctx, "SELECT event_id, agg_id, version, hash FROM "+t.ledger())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []LedgerRow
	for rows.Next() {
		var l LedgerRow
		if err := rows.Scan(&l.EventID, &l.Agg, &l.Version, &l.Hash); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// readHistory returns the consumer's deliveries in order.
func (t tables) readHistory(ctx context.Context, db *sql.DB) ([]Delivery, error) {
	rows, err := db.QueryContext(ctx, "SELECT n, event_id, event_key, agg_id, version, hash, stream_seq, num_delivered, outcome, at_ms FROM "+t.history()+" ORDER BY n")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Delivery
	for rows.Next() {
		var d Delivery
		var seq, nd int64
		if err := rows.Scan(&d.N, &d.EventID, &d.Key, &d.Agg, &d.Version, &d.Hash, &seq, &nd, &d.Outcome, &d.AtMs); err != nil {
			return nil, err
		}
		d.StreamSeq, d.NumDelivered = uint64(seq), uint64(nd)
		out = append(out, d)
	}
	return out, rows.Err()
}

// readApplied counts the handler's commits per event.
func (t tables) readApplied(ctx context.Context, db *sql.DB) (map[string]int, error) {
	rows, err := db.QueryContext(ctx, "SELECT event_id, count(*) FROM "+t.applied()+" GROUP BY event_id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

// readStale returns what the fencing probe saw (PostgreSQL).
func (t tables) readStale(ctx context.Context, db *sql.DB) ([]StaleWrite, error) {
	if t.dialect != "postgres" {
		return nil, nil
	}
	rows, err := db.QueryContext(ctx, "SELECT id, op, holder, writer FROM "+t.stale()+" ORDER BY at")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []StaleWrite
	for rows.Next() {
		var s StaleWrite
		if err := rows.Scan(&s.ID, &s.Op, &s.Holder, &s.Writer); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
