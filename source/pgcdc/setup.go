package pgcdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/pgstore"
)

// ErrWALLevel: the server's wal_level is not logical.
var ErrWALLevel = errors.New("pgcdc: wal_level is not logical")

// ErrSlotLost: the table-less mode's slot was lost or dropped, and with it
// the events it had not delivered.
var ErrSlotLost = errors.New("pgcdc: replication slot lost")

// CheckWALLevel refuses a server whose wal_level is not logical, naming the
// fix.
func CheckWALLevel(ctx context.Context, pool *pgxpool.Pool) error {
	var level string
	if err := pool.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return fmt.Errorf("pgcdc: reading wal_level: %w", err)
	}
	if level != "logical" {
		return fmt.Errorf("%w (it is %q): run `ALTER SYSTEM SET wal_level = logical` as a superuser and restart PostgreSQL (scripts/services.sh does both), or use the polling relay (outbox relay without --source pgcdc)", ErrWALLevel, level)
	}
	return nil
}

// Setup creates what the source needs, when missing: the publication (on
// the outbox table in table mode, on no table in table-less mode), the
// state table <table>_cdc (the streaming lease and the slot's history) and,
// in table-less mode, the buried-events table <table>_dead. Idempotent;
// `outbox migrate --publication` runs it. In table mode the outbox table
// must exist (outbox migrate creates it).
func Setup(ctx context.Context, pool *pgxpool.Pool, cfg Config) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	n := cfg.names()
	if !cfg.TableLess {
		var exists bool
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", n.table).Scan(&exists); err != nil {
			return fmt.Errorf("pgcdc: setup: %w", err)
		}
		if !exists {
			return fmt.Errorf("pgcdc: setup: %w", store.ErrNotMigrated)
		}
	}
	// a creation that still collides (a process that is not a Setup of
	// this table created the same object meanwhile) aborts the
	// transaction; the next attempt finds the object
	for attempt := 1; ; attempt++ {
		err := setupTables(ctx, pool, cfg, n)
		if err == nil {
			break
		}
		if attempt == 3 || !createdMeanwhile(err) {
			return err
		}
	}
	if cfg.TableLess {
		ps, err := pgstore.New(pool, pgstore.Config{Options: store.Options{Table: cfg.Table + "_dead", Schema: cfg.Schema}, DisableNotify: true, VacuumAfter: -1})
		if err != nil {
			return fmt.Errorf("pgcdc: setup: %w", err)
		}
		defer ps.Close()
		if err := ps.Migrate(ctx); err != nil {
			return fmt.Errorf("pgcdc: setup: the buried-events table: %w", err)
		}
	}
	return nil
}

// setupTables creates the state table and the publication in one transaction
// that holds an advisory lock keyed on the state table: Setups of the same
// table (relays started together) run one after the other, so none fails
// on a creation another one made at the same moment.
func setupTables(ctx context.Context, pool *pgxpool.Pool, cfg Config, n names) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgcdc: setup: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('outbox pgcdc setup ' || $1))", n.state); err != nil {
		return fmt.Errorf("pgcdc: setup: taking the set-up lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+n.state+` (
	slot        TEXT        PRIMARY KEY,
	owner       TEXT        NOT NULL DEFAULT '',
	epoch       BIGINT      NOT NULL DEFAULT 0,
	lease_until TIMESTAMPTZ,
	slot_lsn    TEXT        NOT NULL DEFAULT '',
	recover_lsn TEXT        NOT NULL DEFAULT ''
)`); err != nil {
		return fmt.Errorf("pgcdc: setup: creating %s: %w", n.state, err)
	}
	if err := ensurePublication(ctx, tx, cfg, n); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgcdc: setup: %w", err)
	}
	return nil
}

// createdMeanwhile reports whether a CREATE failed because another process
// created the same object at the same moment: IF NOT EXISTS does not cover
// a concurrent creation, which fails on the catalog's unique index (23505)
// or as a duplicate object (42P07, 42710).
func createdMeanwhile(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P07" || pgErr.Code == "42710")
}

// ensurePublication creates the publication unless it exists, and checks
// that an existing one publishes the table (table mode).
func ensurePublication(ctx context.Context, tx pgx.Tx, cfg Config, n names) error {
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", cfg.Publication).Scan(&exists); err != nil {
		return fmt.Errorf("pgcdc: setup: %w", err)
	}
	if !exists {
		stmt := "CREATE PUBLICATION " + pgx.Identifier{cfg.Publication}.Sanitize()
		if !cfg.TableLess {
			// updates too: `outbox dead retry` turns a DEAD row back to
			// NEW with an UPDATE; the source's own DELETEs need not come
			stmt += " FOR TABLE " + n.table + " WITH (publish = 'insert, update')"
		}
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("pgcdc: setup: creating publication %s: %w", cfg.Publication, err)
		}
	}
	if cfg.TableLess {
		return nil
	}
	var has bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = COALESCE(NULLIF($2, ''), current_schema()) AND tablename = $3)`,
		cfg.Publication, cfg.Schema, cfg.Table).Scan(&has); err != nil {
		return fmt.Errorf("pgcdc: setup: %w", err)
	}
	if !has {
		return fmt.Errorf("pgcdc: publication %s exists but does not publish the table %s: `ALTER PUBLICATION %s ADD TABLE %s`, or name another publication", cfg.Publication, n.table, cfg.Publication, n.table)
	}
	return nil
}

// slotInfo is a row of pg_replication_slots.
type slotInfo struct {
	exists    bool
	plugin    string
	database  string
	active    bool
	activePID int32
	walStatus string
	confirmed string
}

func readSlot(ctx context.Context, pool *pgxpool.Pool, slot string) (slotInfo, error) {
	var si slotInfo
	var pid *int32
	var plugin, db, ws, conf *string
	err := pool.QueryRow(ctx, `SELECT plugin, database, active, active_pid, wal_status, confirmed_flush_lsn::text
FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&plugin, &db, &si.active, &pid, &ws, &conf)
	if errors.Is(err, pgx.ErrNoRows) {
		return si, nil
	}
	if err != nil {
		return si, fmt.Errorf("pgcdc: reading slot %s: %w", slot, err)
	}
	si.exists = true
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	si.plugin, si.database, si.walStatus, si.confirmed = str(plugin), str(db), str(ws), str(conf)
	if pid != nil {
		si.activePID = *pid
	}
	return si, nil
}

// Lag is how far a slot is behind the server's WAL.
type Lag struct {
	// Bytes is pg_current_wal_lsn() - confirmed_flush_lsn: WAL written
	// since the last position the source acknowledged.
	Bytes int64
	// RetainedBytes is pg_current_wal_lsn() - restart_lsn: WAL the server
	// keeps for the slot.
	RetainedBytes int64
	// WALStatus is the slot's wal_status (reserved, extended, unreserved,
	// lost).
	WALStatus string
}

// SlotLag reads the lag of slot; an error wrapping ErrSlotLost when the
// slot does not exist.
func SlotLag(ctx context.Context, pool *pgxpool.Pool, slot string) (Lag, error) {
	var l Lag
	var ws *string
	var b, r *int64
	err := pool.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint, (pg_current_wal_lsn() - restart_lsn)::bigint, wal_status
FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&b, &r, &ws)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, fmt.Errorf("%w: slot %s does not exist", ErrSlotLost, slot)
	}
	if err != nil {
		return l, fmt.Errorf("pgcdc: reading the lag of slot %s: %w", slot, err)
	}
	if b != nil {
		l.Bytes = *b
	}
	if r != nil {
		l.RetainedBytes = *r
	}
	if ws != nil {
		l.WALStatus = *ws
	}
	return l, nil
}

// ErrUndelivered: DropSlot refused because events are not delivered yet.
var ErrUndelivered = errors.New("pgcdc: events are not delivered yet")

// DropSlot drops the source's replication slot. It refuses while a process
// streams from it, and, unless force is set, while events are undelivered:
// in table mode rows still NEW in the table (a later start would deliver
// them by its recovery poll, but nothing streams them meanwhile), in
// table-less mode messages of the prefix after the slot's confirmed
// position (dropping the slot loses them for good). It forgets the slot in
// the state table, so the next start creates a new one without reporting
// a lost slot. Dropping a missing slot is not an error.
func DropSlot(ctx context.Context, pool *pgxpool.Pool, cfg Config, force bool) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	n := cfg.names()
	si, err := readSlot(ctx, pool, cfg.Slot)
	if err != nil {
		return err
	}
	if !si.exists {
		_, _ = pool.Exec(ctx, "UPDATE "+n.state+" SET slot_lsn = '' WHERE slot = $1", cfg.Slot)
		return nil
	}
	if si.active {
		return fmt.Errorf("pgcdc: slot %s is in use by the server process %d (a running relay): stop it first", cfg.Slot, si.activePID)
	}
	if !force {
		undelivered, err := countUndelivered(ctx, pool, cfg, n)
		if err != nil {
			return err
		}
		if undelivered > 0 {
			what := "rows of " + n.table + " are still NEW"
			if cfg.TableLess {
				what = "table-less events are still in the slot's WAL; dropping the slot loses them for good"
			}
			return fmt.Errorf("%w: %d %s: run the relay until they are delivered (outbox status), or drop anyway with --force", ErrUndelivered, undelivered, what)
		}
	}
	if _, err := pool.Exec(ctx, "SELECT pg_drop_replication_slot($1)", cfg.Slot); err != nil {
		return fmt.Errorf("pgcdc: dropping slot %s: %w", cfg.Slot, err)
	}
	if _, err := pool.Exec(ctx, "UPDATE "+n.state+" SET slot_lsn = '' WHERE slot = $1", cfg.Slot); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42P01" { // no state table: never streamed
			return fmt.Errorf("pgcdc: slot %s dropped, but forgetting it in %s failed: %w", cfg.Slot, n.state, err)
		}
	}
	return nil
}

// countUndelivered counts what DropSlot would leave behind.
func countUndelivered(ctx context.Context, pool *pgxpool.Pool, cfg Config, n names) (int64, error) {
	if !cfg.TableLess {
		var c int64
		err := pool.QueryRow(ctx, "SELECT count(*) FROM "+n.table+" WHERE status = 'NEW'").Scan(&c)
		if err != nil {
			return 0, fmt.Errorf("pgcdc: counting undelivered rows: %w", err)
		}
		return c, nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rows, err := pool.Query(ctx, `SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
	'proto_version', '1', 'publication_names', $2, 'messages', 'true')`, cfg.Slot, cfg.Publication)
	if err != nil {
		return 0, fmt.Errorf("pgcdc: reading the slot's pending changes: %w", err)
	}
	defer rows.Close()
	var c int64
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return 0, err
		}
		if isEventMessage(data, cfg.Prefix) {
			c++
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("pgcdc: reading the slot's pending changes: %w", err)
	}
	return c, nil
}

// State is one slot's entry in the source's state table: who streams it,
// and where the slot stands.
type State struct {
	Slot      string
	Owner     string    // the process that holds or last held the lease
	Epoch     int64     // the lease's fencing epoch
	Until     time.Time // the lease's expiry (zero when none was taken)
	Live      bool      // the lease has not expired: Owner streams
	Confirmed string    // the slot's confirmed_flush_lsn ("" when the slot does not exist)
	LagBytes  int64     // WAL written after Confirmed
}

// ErrNoState: the table has no CDC source state (no `outbox relay
// --source pgcdc` ever started on it).
var ErrNoState = errors.New("pgcdc: no CDC source state")

// ReadStates reads the state of every slot that streamed cfg's table (by
// any process; nothing needs to run). An error wrapping ErrNoState when
// none ever did.
func ReadStates(ctx context.Context, pool *pgxpool.Pool, cfg Config) ([]State, error) {
	n := cfg.WithDefaults().names()
	rows, err := pool.Query(ctx, `SELECT c.slot, c.owner, c.epoch, c.lease_until, COALESCE(c.lease_until > now(), false),
	COALESCE(s.confirmed_flush_lsn::text, ''), COALESCE((pg_current_wal_lsn() - s.confirmed_flush_lsn)::bigint, 0)
FROM `+n.state+` c LEFT JOIN pg_replication_slots s ON s.slot_name = c.slot ORDER BY c.slot`)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
			return nil, fmt.Errorf("%w in %s: start `outbox relay --source pgcdc` first", ErrNoState, n.state)
		}
		return nil, fmt.Errorf("pgcdc: reading %s: %w", n.state, err)
	}
	var out []State
	for rows.Next() {
		var st State
		var until *time.Time
		if err := rows.Scan(&st.Slot, &st.Owner, &st.Epoch, &until, &st.Live, &st.Confirmed, &st.LagBytes); err != nil {
			rows.Close()
			return nil, fmt.Errorf("pgcdc: reading %s: %w", n.state, err)
		}
		if until != nil {
			st.Until = *until
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgcdc: reading %s: %w", n.state, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w in %s: start `outbox relay --source pgcdc` first", ErrNoState, n.state)
	}
	return out, nil
}
