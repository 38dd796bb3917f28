package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"time"

	"github.com/outbox-go/outbox/store"
)

// DefaultTable is the inbox table's default name.
const DefaultTable = "outbox_inbox"

// DefaultPurgeBatch is Purge's batch size when none is given.
const DefaultPurgeBatch = 1000

// Config configures an Inbox. The zero value is usable.
type Config struct {
	// Table is the inbox table's name; default "outbox_inbox". CheckVersion
	// keeps its state in Table+"_versions". Validated against
	// ^[a-z_][a-z0-9_]{0,62}$ and at most 50 characters, so the derived
	// names fit.
	Table string
	// Schema is the PostgreSQL schema (created by Migrate when missing) or
	// the MySQL database (which must exist) holding the tables; default:
	// the connection's current one. Ignored by SQLite.
	Schema string
	// Dialect is the database; default Detect: from the driver of the
	// *sql.DB (pgx's stdlib, lib/pq, go-sql-driver/mysql, modernc.org/sqlite,
	// mattn/go-sqlite3, ncruces/go-sqlite3).
	Dialect Dialect
	// TxOptions are used for the transactions Handle begins; default nil:
	// the database's default isolation (READ COMMITTED on PostgreSQL,
	// REPEATABLE READ on MySQL), which is all deduplication needs.
	TxOptions *sql.TxOptions
}

// Inbox records which events each consumer has processed, inside the
// consumer's own transaction. It is safe for concurrent use.
type Inbox struct {
	db       *sql.DB
	dialect  Dialect
	schema   string
	table    string // unquoted
	quoted   string
	versions string // quoted
	txOpts   *sql.TxOptions
	stmts    statements
}

// Execer is what HandleTx and CheckVersion need: *sql.Tx has it, and so
// have *sql.Conn and the transaction handles of sqlx, bun and ent.
type Execer = store.Execer

// New returns an Inbox over db, which stays the caller's to close. It
// creates nothing: call Migrate once at start-up.
func New(db *sql.DB, cfg Config) (*Inbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: db is nil; pass the *sql.DB your handlers write to", ErrInvalidConfig)
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if err := store.ValidateName("inbox table", cfg.Table); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if len(cfg.Table) > 50 {
		return nil, fmt.Errorf("%w: table %q: keep it to 50 characters so the derived names (%s_versions, %s_processed_at_idx) fit", ErrInvalidConfig, cfg.Table, cfg.Table, cfg.Table)
	}
	if cfg.Schema != "" {
		if err := store.ValidateName("schema", cfg.Schema); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	d := cfg.Dialect
	switch d {
	case Detect:
		var err error
		if d, err = detectDialect(db); err != nil {
			return nil, err
		}
	case Postgres, MySQL, SQLite:
	default:
		return nil, fmt.Errorf("%w: unknown dialect %v; use inbox.Postgres, inbox.MySQL or inbox.SQLite", ErrInvalidConfig, d)
	}
	if d == SQLite {
		cfg.Schema = ""
	}
	in := &Inbox{
		db:      db,
		dialect: d,
		schema:  cfg.Schema,
		table:   cfg.Table,
		txOpts:  cfg.TxOptions,
		stmts:   buildStatements(d, cfg.Schema, cfg.Table),
	}
	q := func(n string) string {
		if in.schema != "" {
			return quote(d, in.schema) + "." + quote(d, n)
		}
		return quote(d, n)
	}
	in.quoted, in.versions = q(cfg.Table), q(cfg.Table+"_versions")
	return in, nil
}

// Dialect returns the database dialect in use (detected or configured).
func (in *Inbox) Dialect() Dialect { return in.dialect }

// Table returns the quoted, qualified inbox table name, for your own
// queries and monitoring.
func (in *Inbox) Table() string { return in.quoted }

// VersionsTable returns the quoted, qualified name of CheckVersion's table.
func (in *Inbox) VersionsTable() string { return in.versions }

// DB returns the database the inbox uses.
func (in *Inbox) DB() *sql.DB { return in.db }

// Migrate creates the inbox and versions tables when missing. It is
// idempotent and safe when several instances migrate at once (an advisory
// lock on PostgreSQL, a named lock on MySQL, the writer lock on SQLite).
func (in *Inbox) Migrate(ctx context.Context) error {
	var err error
	switch in.dialect {
	case Postgres:
		err = in.migratePostgres(ctx)
	case MySQL:
		err = in.migrateMySQL(ctx)
	default:
		err = in.migrateTx(ctx, nil)
	}
	if err != nil {
		return fmt.Errorf("inbox: migrate %s: %w", in.quoted, err)
	}
	return nil
}

func (in *Inbox) migratePostgres(ctx context.Context) error {
	return in.migrateTx(ctx, func(tx *sql.Tx) error {
		// CREATE … IF NOT EXISTS alone races on PostgreSQL's catalogs.
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(in.schema, in.table)); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		if in.schema != "" {
			if _, err := tx.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+quote(Postgres, in.schema)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (in *Inbox) migrateTx(ctx context.Context, first func(*sql.Tx) error) error {
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if first != nil {
		if err := first(tx); err != nil {
			return err
		}
	}
	for _, s := range in.stmts.migrate {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// migrateMySQL runs the DDL (which commits implicitly on MySQL) under a
// named lock held by one connection.
func (in *Inbox) migrateMySQL(ctx context.Context) error {
	conn, err := in.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	name := fmt.Sprintf("outbox_inbox_migrate_%x", lockKey(in.schema, in.table))
	wait := 60
	if dl, ok := ctx.Deadline(); ok {
		wait = max(1, int(time.Until(dl).Seconds()))
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", name, wait).Scan(&got); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("lock: another process held the migration lock %q for %ds; try again", name, wait)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(?)", name) //nolint:errcheck // released with the session anyway
	for _, s := range in.stmts.migrate {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// Result says what Handle did with a message.
type Result int

const (
	// Failed is returned with an error: nothing was recorded and the
	// handler's writes were rolled back, so the message may be redelivered.
	Failed Result = iota
	// Processed: the handler ran and its writes committed together with
	// the inbox record.
	Processed
	// Duplicate: this consumer had already processed the event; the
	// handler did not run. Acknowledge the message.
	Duplicate
)

func (r Result) String() string {
	switch r {
	case Failed:
		return "failed"
	case Processed:
		return "processed"
	case Duplicate:
		return "duplicate"
	}
	return fmt.Sprintf("Result(%d)", int(r))
}

// HandlerFunc does a consumer's work for one message with tx, the
// transaction that also records the message as processed. It must not
// commit or roll back tx. Returning an error (or panicking) rolls
// everything back.
type HandlerFunc func(ctx context.Context, tx *sql.Tx) error

// Handle processes msg at most once per consumer: in one transaction it
// records (consumer, msg.EventID) in the inbox table and, unless that pair
// was recorded before, runs fn with the same transaction and commits.
//
//   - First delivery: fn runs; its writes and the record commit together →
//     Processed.
//   - Already processed: fn does not run; the transaction is rolled back →
//     Duplicate, nil. Acknowledge the message.
//   - fn returns an error or panics, or the commit fails: everything is
//     rolled back and nothing is recorded → Failed and the error (a
//     *PanicError for a panic). Let the broker redeliver.
//
// Two instances handling the same event at once do not both run fn to
// commit: the second one's insert waits on the first one's primary-key
// entry (on SQLite, on the writer lock) and then sees the duplicate, or,
// if the first rolled back, processes it itself. When recording loses a
// deadlock or serialization conflict (IsTransient; on MySQL, waiters on a
// rolled-back duplicate deadlock), fn has not run yet and Handle retries in
// a new transaction, up to 5 attempts in all.
//
// consumer names the consuming service or handler ("points"): each
// consumer processes every event once, independently of the others.
func (in *Inbox) Handle(ctx context.Context, consumer string, msg Message, fn HandlerFunc) (Result, error) {
	if fn == nil {
		return Failed, fmt.Errorf("%w: Handle needs a handler function", ErrInvalidConfig)
	}
	id, err := in.check(consumer, msg)
	if err != nil {
		return Failed, err
	}
	for attempt := 1; ; attempt++ {
		r, again, err := in.handleOnce(ctx, consumer, id, msg, fn)
		if !again || attempt == recordAttempts {
			return r, err
		}
		// The record insert lost a deadlock or serialization conflict
		// before fn ran (MySQL: waiters on a rolled-back duplicate
		// deadlock on the freed gap). Nothing ran; try afresh.
		t := time.NewTimer(time.Duration(attempt) * time.Duration(1+rand.IntN(5)) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return Failed, err
		case <-t.C:
		}
	}
}

// recordAttempts bounds Handle's tries when recording loses a deadlock.
const recordAttempts = 5

// handleOnce is one transaction of Handle. again reports a transient
// failure of the record step, before fn ran.
func (in *Inbox) handleOnce(ctx context.Context, consumer, id string, msg Message, fn HandlerFunc) (r Result, again bool, err error) {
	tx, err := in.db.BeginTx(ctx, in.txOpts)
	if err != nil {
		return Failed, false, fmt.Errorf("inbox: begin transaction for event %s: %w", id, err)
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback() // also when fn called runtime.Goexit
		}
	}()
	dup, err := in.record(ctx, tx, consumer, id, msg)
	if err != nil {
		return Failed, IsTransient(err), err
	}
	if dup {
		done = true
		_ = tx.Rollback()
		return Duplicate, false, nil
	}
	if err := runHandler(ctx, tx, fn); err != nil {
		done = true
		_ = tx.Rollback()
		var pe *PanicError
		if errors.As(err, &pe) {
			return Failed, false, err
		}
		return Failed, false, fmt.Errorf("inbox: consumer %q, event %s: handler failed, nothing was recorded and the message will be redelivered: %w", consumer, id, err)
	}
	done = true
	if err := tx.Commit(); err != nil {
		return Failed, false, fmt.Errorf("inbox: consumer %q, event %s: commit failed, so it is unknown whether it was processed; let the message be redelivered (if it did commit, the redelivery is a Duplicate): %w", consumer, id, err)
	}
	return Processed, false, nil
}

// IsTransient reports whether err is a deadlock or serialization failure
// (PostgreSQL 40P01/40001, MySQL 1213): the transaction was rolled back and
// running it again may succeed. Handle retries these itself when they hit
// the inbox record; callers of HandleTx should retry the transaction.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	var st interface{ SQLState() string } // pgx's *pgconn.PgError
	if errors.As(err, &st) {
		c := st.SQLState()
		return c == "40P01" || c == "40001"
	}
	msg := err.Error()
	return strings.Contains(msg, "Error 1213") || // go-sql-driver/mysql: ER_LOCK_DEADLOCK
		strings.Contains(msg, "deadlock detected") || // lib/pq
		strings.Contains(msg, "could not serialize access")
}

func runHandler(ctx context.Context, tx *sql.Tx, fn HandlerFunc) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return fn(ctx, tx)
}

// HandleTx records msg as processed by consumer using the caller's
// transaction, for code that manages its own. It returns dup=true when the
// consumer had processed the event already: then skip the work and roll
// back (nothing was written, and on PostgreSQL the transaction stays
// usable). Otherwise do the work with the same transaction and commit;
// rolling back forgets the record, so a redelivery is processed again.
//
// On an error other than a validation error, roll the transaction back:
// PostgreSQL aborts a transaction whose statement failed.
func (in *Inbox) HandleTx(ctx context.Context, tx Execer, consumer string, msg Message) (dup bool, err error) {
	if tx == nil {
		return false, fmt.Errorf("%w: HandleTx needs the caller's transaction", ErrInvalidConfig)
	}
	id, err := in.check(consumer, msg)
	if err != nil {
		return false, err
	}
	return in.record(ctx, tx, consumer, id, msg)
}

func (in *Inbox) check(consumer string, msg Message) (id string, err error) {
	if err := checkConsumer(consumer); err != nil {
		return "", err
	}
	id, err = ParseEventID(msg.EventID)
	if err != nil {
		return "", fmt.Errorf("%w (got %q)", err, shorten(msg.EventID))
	}
	return id, nil
}

func (in *Inbox) record(ctx context.Context, tx Execer, consumer, id string, msg Message) (dup bool, err error) {
	res, err := tx.ExecContext(ctx, in.stmts.record, consumer, id, recordText(msg.Type), recordText(msg.Key))
	if err != nil {
		return false, in.wrapTableError("record event "+id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("inbox: record event %s: %w", id, err)
	}
	return n == 0, nil
}

// wrapTableError adds ErrNotMigrated when err says the table is missing.
func (in *Inbox) wrapTableError(what string, err error) error {
	if isUndefinedTable(err) {
		return fmt.Errorf("inbox: %s in %s: %w: %w", what, in.quoted, ErrNotMigrated, err)
	}
	return fmt.Errorf("inbox: %s in %s: %w", what, in.quoted, err)
}

// isUndefinedTable recognizes "no such table" from the supported drivers
// without importing them.
func isUndefinedTable(err error) bool {
	var st interface{ SQLState() string } // pgx's *pgconn.PgError
	if errors.As(err, &st) {
		return st.SQLState() == "42P01"
	}
	msg := err.Error()
	return strings.Contains(msg, "Error 1146") || // go-sql-driver/mysql: ER_NO_SUCH_TABLE
		strings.Contains(msg, "no such table") || // SQLite
		(strings.Contains(msg, "relation") && strings.Contains(msg, "does not exist")) // lib/pq
}

// Purge deletes inbox records processed more than olderThan ago, in
// statements of at most batch rows (default 1000) so no lock is held for
// long, and returns how many went. Run it periodically.
//
// Choose olderThan well beyond the longest time a broker may still
// redeliver a message (retention of the topic or stream, dead-letter
// replays): an event redelivered after its record was purged is processed
// again. Days, not minutes. CheckVersion's table is not purged.
func (in *Inbox) Purge(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("%w: Purge needs a positive age, well beyond the broker's redelivery window (e.g. 7*24*time.Hour)", ErrInvalidConfig)
	}
	if batch <= 0 {
		batch = DefaultPurgeBatch
	}
	var total int64
	for {
		res, err := in.db.ExecContext(ctx, in.stmts.purge, olderThan.Microseconds(), batch)
		if err != nil {
			return total, in.wrapTableError("purge", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("inbox: purge: %w", err)
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}
