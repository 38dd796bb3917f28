package mysqlstore

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// Config configures a Store. The zero value is usable.
type Config struct {
	store.Options
}

// Store is the MySQL/MariaDB store. It is safe for concurrent use.
type Store struct {
	db    *sql.DB
	ownDB bool
	opts  store.Options

	table, archive, migrations string // quoted
	schema                     any    // nil, or the schema name (for lock names)

	mu      sync.Mutex
	wakeups driver.Wakeups
	closed  bool
	watch   watcher // notify.go

	sweepAfter string                   // owned.go: where the next sweep of parked keys starts
	claimHook  func()                   // tests: runs in an owned claim before its commit
	sessions   map[string]*relaySession // each owner's own session (session.go)
	busyOwners sync.Map                 // owned.go: owners whose last claim took or parked ≥ half its batch
}

var _ store.Store = (*Store)(nil)

// New returns a store over db, which stays the caller's to close. db may come
// from any DSN of github.com/go-sql-driver/mysql: times are read as Unix
// epochs, so parseTime and loc do not matter. Two settings help:
// interpolateParams=true saves a round trip on every statement (the driver
// otherwise prepares, executes and closes each one), and a session
// time_zone without daylight saving ('+00:00', as Open and DSN set it) keeps
// lease and retry times exact during the hour the clocks go back, because
// MySQL does TIMESTAMP arithmetic in the session's time zone.
func New(db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("mysqlstore: db is nil")
	}
	opts := cfg.Options.WithDefaults()
	err := opts.Validate()
	if err != nil {
		return nil, err
	}
	q := func(name string) string {
		if opts.Schema != "" {
			return quote(opts.Schema) + "." + quote(name)
		}
		return quote(name)
	}
	s := &Store{
		db:         db,
		opts:       opts,
		table:      q(opts.Table),
		archive:    q(opts.Table + "_archive"),
		migrations: q(opts.Table + "_migrations"),
	}
	if opts.Schema != "" {
		s.schema = opts.Schema
	}
	s.watch.every = opts.ProbeInterval
	return s, nil
}

// quote quotes a name already checked by store.ValidateName (no backticks).
func quote(name string) string { return "`" + name + "`" }

// Open connects to url (mysql://user:pass@host:3306/db?param=…, see DSN)
// with a pool of its own, closed by Close.
func Open(ctx context.Context, url string, cfg Config) (*Store, error) {
	if err := cfg.Options.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	mc, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	if mc.DBName == "" && cfg.Schema == "" {
		return nil, fmt.Errorf("%w: it names no database; %s (or set Config.Schema)", ErrBadURL, urlForm)
	}
	connector, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	db := sql.OpenDB(connector)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		var me *mysql.MySQLError
		switch {
		case errors.As(err, &me) && me.Number == errBadDB:
			return nil, store.Refused(fmt.Errorf("mysqlstore: database %q does not exist on %s: create it (CREATE DATABASE %s) or fix the URL", mc.DBName, mc.Addr, quote(mc.DBName)))
		case errors.As(err, &me) && refused(me.Number):
			return nil, store.Refused(fmt.Errorf("mysqlstore: %s refused the connection: %w; check the user and password in the URL and the user's grants (SHOW GRANTS FOR user)", mc.Addr, err))
		case errors.As(err, &me):
			return nil, fmt.Errorf("mysqlstore: %s refused the connection: %w", mc.Addr, err)
		}
		return nil, fmt.Errorf("mysqlstore: cannot reach %s: %w", mc.Addr, err)
	}
	if db, err = idleTransactions(ctx, db, mc); err != nil {
		return nil, err
	}
	s, err := New(db, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.ownDB = true
	return s, nil
}

// idleTxTimeout is the session's idle_transaction_timeout on MariaDB (in
// seconds): a relay's transactions wait between their statements for one
// round trip only, so a connection idle that long inside one belongs to a
// process that stopped (SIGSTOP, a stuck host) and holds its row locks,
// which keep every other relay from its own shard rows, from the rows it
// acks and from the stopped relay's shards however long ago its lease
// ended. The server then ends the connection and rolls back: the lease is
// the bound again. (PostgreSQL sends a claim's whole transaction in one
// pipeline, so a stopped client leaves none open.)
const idleTxTimeout = 5

// idleTransactions returns db, or on MariaDB (MySQL has no such setting) a
// pool of the same connector whose sessions set idle_transaction_timeout,
// unless the URL sets it.
func idleTransactions(ctx context.Context, db *sql.DB, mc *mysql.Config) (*sql.DB, error) {
	if _, set := mc.Params["idle_transaction_timeout"]; set {
		return db, nil
	}
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		db.Close()
		return nil, fmt.Errorf("mysqlstore: cannot reach %s: %w", mc.Addr, err)
	}
	if !strings.Contains(version, "MariaDB") {
		return db, nil
	}
	db.Close()
	if mc.Params == nil {
		mc.Params = map[string]string{}
	}
	mc.Params["idle_transaction_timeout"] = strconv.Itoa(idleTxTimeout)
	connector, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	return sql.OpenDB(connector), nil
}

// DB returns the pool the store uses.
func (s *Store) DB() *sql.DB { return s.db }

// Table returns the quoted table name, qualified when Config.Schema is set.
func (s *Store) Table() string { return s.table }

// Close closes the pool if Open created it.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	stop, done := s.watch.stop, s.watch.done
	s.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	s.closeSessions()
	if s.ownDB {
		return s.db.Close()
	}
	return nil
}

// lockName is the name of a server-wide GET_LOCK lock of this table:
// arguments schema (or NULL for the connection's database), table, purpose.
// Hashed because MySQL refuses names longer than 64 characters.
const lockName = "CONCAT('outbox:', SHA1(CONCAT_WS('.', COALESCE(?, DATABASE()), ?, ?)))"

// migrateLockWait is how long GET_LOCK waits for another migration's DDL
// when ctx has no deadline.
const migrateLockWait = 5 * time.Minute

// heldLock is a GET_LOCK held by a dedicated connection.
type heldLock struct {
	s       *Store
	conn    *sql.Conn
	purpose string
	done    bool
}

// lock takes the table's named lock on a dedicated connection.
func (s *Store) lock(ctx context.Context, purpose string, wait time.Duration) (*heldLock, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	l := &heldLock{s: s, conn: conn, purpose: purpose}
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	secs := max(1, int64(math.Ceil(wait.Seconds())))
	var got sql.NullInt64
	err = conn.QueryRowContext(ctx, "SELECT GET_LOCK("+lockName+", ?)", s.schema, s.opts.Table, purpose, secs).Scan(&got)
	if err != nil {
		l.discard()
		return nil, err
	}
	if got.Int64 != 1 {
		l.discard()
		return nil, fmt.Errorf("waited %ds for the %s lock of %s: another process holds it (a relay stopped in the middle of a claim? it is released when that connection closes)", secs, purpose, s.table)
	}
	return l, nil
}

// discard closes the connection instead of pooling it: a pooled connection
// must never hold the lock.
func (l *heldLock) discard() {
	_ = l.conn.Raw(func(any) error { return sqldriver.ErrBadConn })
	_ = l.conn.Close()
}

// unlock releases the lock, in the same statement reading the extra
// columns (", expr, …") into dest, and gives the connection back. When the
// release cannot be confirmed the connection is discarded, which releases
// the lock on the server. A second call does nothing.
func (l *heldLock) unlock(extra string, args []any, dest ...any) error {
	if l.done {
		return nil
	}
	l.done = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ok sql.NullInt64
	err := l.conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK("+lockName+")"+extra, append([]any{l.s.schema, l.s.opts.Table, l.purpose}, args...)...).Scan(append([]any{&ok}, dest...)...)
	if err == nil && ok.Int64 != 1 {
		err = fmt.Errorf("the %s lock was not held any more", l.purpose)
	}
	if err != nil {
		l.discard()
		return err
	}
	return l.conn.Close()
}

// Migrate creates the schema (schema.go) unless it is in place, under a
// GET_LOCK, so several processes may migrate at once.
func (s *Store) Migrate(ctx context.Context) error {
	l, err := s.lock(ctx, "migrate", migrateLockWait)
	if err != nil {
		return wrap("migrate: lock", err)
	}
	defer l.unlock("", nil) //nolint:errcheck // a failed release discards the connection, which releases the lock
	conn := l.conn
	if s.opts.Schema != "" {
		if _, err := conn.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+quote(s.opts.Schema)+" CHARACTER SET utf8mb4"); err != nil {
			return fmt.Errorf("mysqlstore: migrate: create database: %w", err)
		}
	}
	if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+s.migrations+" (version INT NOT NULL PRIMARY KEY, applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB"); err != nil {
		return wrap("migrate", err)
	}
	var current int
	if err := conn.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM "+s.migrations).Scan(&current); err != nil {
		return wrap("migrate", err)
	}
	if current >= migrationVersion {
		return nil
	}
	for _, stmt := range schema(s.table, s.archive, s.opts.Table) {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("mysqlstore: migrate: %w", err)
		}
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO "+s.migrations+" (version) VALUES (?)", migrationVersion); err != nil {
		return fmt.Errorf("mysqlstore: migrate: %w", err)
	}
	return nil
}

// MySQL error numbers this store translates.
const (
	errNoSuchTable = 1146 // ER_NO_SUCH_TABLE
	errBadDB       = 1049 // ER_BAD_DB_ERROR
	errNoDB        = 1046 // ER_NO_DB_ERROR
	errBadField    = 1054 // ER_BAD_FIELD_ERROR
)

// wrap adds context and turns "table does not exist" into ErrNotMigrated.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case errNoSuchTable, errBadDB:
			return fmt.Errorf("mysqlstore: %s: %w (%s)", op, store.ErrNotMigrated, me.Message)
		case errBadField:
			return fmt.Errorf("mysqlstore: %s: a column is missing: the table does not have the schema `outbox migrate --db URL` creates (a table of another shape under this name?) (%w)", op, err)
		case errNoDB:
			return fmt.Errorf("mysqlstore: %s: the connection has no database selected: name one in the URL (mysql://…/dbname) or set Config.Schema: %w", op, err)
		}
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("mysqlstore: %s: %w", op, store.ErrNotFound)
	}
	return fmt.Errorf("mysqlstore: %s: %w", op, err)
}

// refused reports whether a MySQL error met at connect is the server
// refusing for good: access denied (1044 to the database, 1045 for the
// password, 1698 without one). Too many connections (1040) or a server
// shutting down is worth waiting for.
func refused(number uint16) bool {
	return number == 1044 || number == 1045 || number == 1698
}
