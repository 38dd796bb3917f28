package sqlitestore

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// Config configures a Store. The zero value is usable.
type Config struct {
	// Options are the settings every SQL store shares (table name, payload
	// limit, KeepSent). Schema is ignored: an SQLite file has one schema.
	store.Options
}

// Store is the SQLite store. It is safe for concurrent use, also by several
// processes on one database file.
type Store struct {
	db     *sql.DB
	ownDB  bool
	keeper *sql.Conn // holds an in-memory database open until Close
	gate   gate      // this process's writers, one at a time
	opts   store.Options

	table, archive, migrations string // quoted

	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt // nil after Close

	mu        sync.Mutex
	wakeups   driver.Wakeups
	watching  bool
	stopWatch context.CancelFunc
	watchDone chan struct{}
	closed    bool
}

var _ store.Store = (*Store)(nil)

// New returns a store over db, which stays the caller's to close. db must be
// a SQLite database/sql handle (modernc.org/sqlite, or any driver that takes
// ?NNN placeholders, SQLite 3.35 or later). Open it with a DSN from DSN, or
// give it a busy timeout yourself: without one, concurrent writers fail with
// SQLITE_BUSY instead of waiting their turn.
func New(db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("sqlitestore: db is nil")
	}
	opts := cfg.Options.WithDefaults()
	err := opts.Validate()
	if err != nil {
		return nil, err
	}
	q := quote
	s := &Store{
		db:         db,
		opts:       opts,
		table:      q(opts.Table),
		archive:    q(opts.Table + "_archive"),
		migrations: q(opts.Table + "_migrations"),
		gate:       acquireWriteGate(db),
		stmts:      map[string]*sql.Stmt{},
	}
	return s, nil
}

// Open opens the database a URL names (sqlite:path/to/file.db,
// sqlite://path/to/file.db, sqlite::memory:; see DSN for the connection
// settings) with a *sql.DB of its own, closed by Close. The file is created
// if missing; its directory must exist.
func Open(ctx context.Context, url string, cfg Config) (*Store, error) {
	t, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	if !t.memory {
		dir := filepath.Dir(t.path)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("sqlitestore: directory %q of %q does not exist: create it first (the database file itself is created on first use)", dir, t.path)
		}
		if fi, err := os.Stat(t.path); err == nil && fi.IsDir() {
			return nil, fmt.Errorf("sqlitestore: %q is a directory: name a database file inside it, e.g. sqlite:%s", t.path, filepath.Join(t.path, "outbox.db"))
		}
	}
	db, err := sql.Open("sqlite", t.dsn())
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	// Idle connections are kept: opening one re-runs the pragmas.
	db.SetMaxIdleConns(8)
	s, err := New(db, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.ownDB = true
	// The in-memory database lives while a connection to it is open; the
	// keeper also serves as the reachability check for files.
	if s.keeper, err = db.Conn(ctx); err == nil {
		err = s.keeper.PingContext(ctx)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlitestore: cannot open %q: %w", clip(url), err)
	}
	if !t.memory {
		s.keeper.Close()
		s.keeper = nil
	}
	return s, nil
}

// DB returns the database handle the store uses.
func (s *Store) DB() *sql.DB { return s.db }

// Table returns the quoted table name.
func (s *Store) Table() string { return s.table }

// Close closes the database if Open created it.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	stop, done := s.stopWatch, s.watchDone
	s.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	s.stmtMu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = nil
	s.stmtMu.Unlock()
	releaseWriteGate(s.db)
	if s.keeper != nil {
		s.keeper.Close()
	}
	if s.ownDB {
		return s.db.Close()
	}
	return nil
}

// immediate runs fn inside BEGIN IMMEDIATE … COMMIT on one connection: the
// write lock is taken (waiting up to the busy timeout) before anything is
// read, so a transaction never has to upgrade a read lock, which SQLite
// refuses without waiting when another writer came first. This does not
// depend on the _txlock setting of a caller's *sql.DB. It runs under the
// write gate.
func (s *Store) immediate(ctx context.Context, op string, fn func(c *sql.Conn) error) error {
	if err := s.gate.lock(ctx); err != nil {
		return wrap(op, err)
	}
	defer s.gate.unlock()
	c, err := s.db.Conn(ctx)
	if err != nil {
		return wrap(op, err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return wrap(op, err)
	}
	if err := fn(c); err != nil {
		rollback(c)
		return wrap(op, err)
	}
	// COMMIT is not cancelled: a commit cut short would leave it unknown
	// whether the claim or ack happened. In WAL mode it never waits.
	if _, err := c.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err != nil {
		rollback(c)
		return wrap(op, err)
	}
	return nil
}

// rollback ends the transaction on c; when that fails the connection's state
// is unknown, so database/sql is told to throw it away rather than hand an
// open transaction to the next caller.
func rollback(c *sql.Conn) {
	_, err := c.ExecContext(context.Background(), "ROLLBACK")
	if err != nil && !strings.Contains(err.Error(), "no transaction is active") {
		_ = c.Raw(func(any) error { return sqldriver.ErrBadConn })
	}
}

// exec runs one writing statement, prepared and cached, under the write
// gate. A single statement is a transaction of its own that takes the write
// lock before it reads anything, like BEGIN IMMEDIATE.
func (s *Store) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if err := s.gate.lock(ctx); err != nil {
		return nil, err
	}
	defer s.gate.unlock()
	return st.ExecContext(ctx, args...)
}

// query runs one writing statement with RETURNING like exec, handing each
// row to scan. The statement commits when its rows are done, so the gate is
// held until then.
func (s *Store) query(ctx context.Context, query string, scan func(*sql.Rows) error, args ...any) error {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return err
	}
	if err := s.gate.lock(ctx); err != nil {
		return err
	}
	defer s.gate.unlock()
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close() // the commit's error, if any
}

// Migrate creates the schema (schema.go) unless it is in place. BEGIN
// IMMEDIATE serializes concurrent migrations, also across processes; DDL
// in SQLite is transactional, so a failed Migrate leaves nothing behind.
func (s *Store) Migrate(ctx context.Context) error {
	return s.immediate(ctx, "migrate", func(c *sql.Conn) error {
		if _, err := c.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+s.migrations+" (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL DEFAULT "+nowUS+")"); err != nil {
			return err
		}
		var current int
		if err := c.QueryRowContext(ctx, "SELECT COALESCE(max(version), 0) FROM "+s.migrations).Scan(&current); err != nil {
			return err
		}
		if current >= migrationVersion {
			return nil
		}
		for _, stmt := range schema(s.table, s.archive, s.opts.Table) {
			if _, err := c.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		_, err := c.ExecContext(ctx, "INSERT INTO "+s.migrations+" (version) VALUES (?)", migrationVersion)
		return err
	})
}

// maxRowsPerInsert keeps one INSERT under SQLite's 32766 bound variables
// (at most 10 per row).
const maxRowsPerInsert = 3000

const insertCols = "event_id, topic, event_key, event_type, aggregate_type, schema_version, payload, content_type, headers"

// buildInsert returns the statements and arguments that write msgs (already
// validated and normalized): multi-row INSERTs, so ids follow the input
// order. A chunk without AvailableAt leaves next_attempt_at to its default
// (the insert's clock reading, equal to created_at).
func (s *Store) buildInsert(msgs []outbox.Message) []insert {
	var out []insert
	for start := 0; start < len(msgs); start += maxRowsPerInsert {
		chunk := msgs[start:min(start+maxRowsPerInsert, len(msgs))]
		delayed := slices.ContainsFunc(chunk, func(m outbox.Message) bool { return !m.AvailableAt.IsZero() })
		cols, row, per := insertCols, "(?,?,?,?,?,?,?,?,?)", 9
		if delayed {
			cols, row, per = insertCols+", next_attempt_at", "(?,?,?,?,?,?,?,?,?,COALESCE(?,"+nowUS+"))", 10
		}
		var b strings.Builder
		b.Grow(30 + len(s.table) + len(cols) + len(chunk)*(len(row)+1))
		b.WriteString("INSERT INTO " + s.table + " (" + cols + ") VALUES ")
		a := make([]any, 0, len(chunk)*per)
		for i, m := range chunk {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(row)
			a = append(a, m.EventID, m.Topic, m.Key, m.Type, m.AggregateType, int64(m.SchemaVersion), m.Payload, m.ContentType, driver.EncodeHeaders(m.Headers))
			if delayed {
				var avail any
				if !m.AvailableAt.IsZero() {
					avail = m.AvailableAt.UnixMicro()
				}
				a = append(a, avail)
			}
		}
		out = append(out, insert{query: b.String(), rows: len(chunk), args: a})
	}
	return out
}

// insert is one multi-row INSERT.
type insert struct {
	query string
	rows  int
	args  []any
}

// maxCachedRows: INSERTs of up to this many rows (the usual one to three
// events of a business transaction) are prepared once and reused; SQLite
// takes longer to compile an INSERT into this table than to run it.
const maxCachedRows = 4

const errOtherDB = "sql: Tx.Stmt: statement from different database used"

// execInsert runs ins with ex, through a cached prepared statement when ex
// is the store's *sql.DB or a transaction of it.
func (s *Store) execInsert(ctx context.Context, ex store.Execer, ins insert) error {
	if ins.rows <= maxCachedRows {
		switch x := ex.(type) {
		case *sql.Tx:
			if st, err := s.stmt(ctx, ins.query); err == nil {
				_, err = x.StmtContext(ctx, st).ExecContext(ctx, ins.args...)
				if err == nil || err.Error() != errOtherDB {
					return err
				}
			}
		case *sql.DB:
			if x == s.db {
				st, err := s.stmt(ctx, ins.query)
				if err != nil {
					return err
				}
				_, err = st.ExecContext(ctx, ins.args...)
				return err
			}
		}
	}
	_, err := ex.ExecContext(ctx, ins.query, ins.args...)
	return err
}

func (s *Store) execAll(ctx context.Context, ex store.Execer, inserts []insert) error {
	for _, ins := range inserts {
		if err := s.execInsert(ctx, ex, ins); err != nil {
			return err
		}
	}
	return nil
}

// Enqueue writes msgs in a transaction of its own and wakes this process's
// relays.
func (s *Store) Enqueue(ctx context.Context, msgs ...outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	norm, err := driver.Prepare(s.opts, msgs)
	if err != nil {
		return err
	}
	inserts := s.buildInsert(norm)
	if len(inserts) == 1 { // one statement is a transaction by itself
		err = s.gate.lock(ctx)
		if err == nil {
			err = s.execInsert(ctx, s.db, inserts[0])
			s.gate.unlock()
		}
		err = wrap("enqueue", err)
	} else {
		err = s.immediate(ctx, "enqueue", func(c *sql.Conn) error { return s.execAll(ctx, c, inserts) })
	}
	if err != nil {
		return err
	}
	s.signal()
	return nil
}

// EnqueueTx writes msgs with the caller's *sql.Tx (or *sql.Conn, *sql.DB):
// they commit or roll back with it. Validation comes first: on a validation
// error nothing is sent to the database and tx stays usable.
//
// The INSERT gives the caller's transaction SQLite's write lock until it
// commits or rolls back: keep such transactions short, since every other
// writer (relays acking, other requests) waits for them. Notify's watcher
// sees the commit; there is nothing to signal here, before it.
func (s *Store) EnqueueTx(ctx context.Context, tx store.Execer, msgs ...outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	norm, err := driver.Prepare(s.opts, msgs)
	if err != nil {
		return err
	}
	return wrap("enqueue", s.execAll(ctx, tx, s.buildInsert(norm)))
}

// eventCols are read back as an outbox.Event; CAST keeps a payload that a
// producer wrote as TEXT byte for byte.
const eventCols = "id, event_id, topic, event_key, event_type, aggregate_type, schema_version, CAST(payload AS BLOB), content_type, headers, attempts, created_at"
const recordCols = eventCols + ", status, last_error, next_attempt_at, lease_owner, lease_until, sent_at, length(CAST(payload AS BLOB))"

// previewCols are recordCols with the payload's first store.PreviewBytes
// only.
var previewCols = strings.Replace(recordCols, "CAST(payload AS BLOB),", "substr(CAST(payload AS BLOB), 1, "+strconv.Itoa(store.PreviewBytes)+"),", 1)

// idsJSON encodes ids for json_each: one bound value however many ids.
func idsJSON(ids []int64) string {
	b := make([]byte, 0, len(ids)*8+2)
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, ']'))
}

func micros(us int64) time.Time { return time.UnixMicro(us) }

// yearUS is a year in µs: a NEW row due later than that is held for good
// (Stats.HeldForGood).
const yearUS = "31536000000000"

// leaseExpired is the SQL of "the lease of SENDING row p ran out at now":
// its lease_until has passed, or it has none. A relay never writes a
// SENDING row without a lease; a plain-SQL producer that sets the status
// does, and since NULL <= now is not true such a row would never be
// claimed, while no live lease held its key either, so the key's later
// events passed it. In the sending index's (event_key, lease_until) both
// halves are one range of a key: SQLite sorts NULL first.
func leaseExpired(p, now string) string {
	return "(" + p + "lease_until IS NULL OR " + p + "lease_until <= " + now + ")"
}

// schemaVersion reads the schema_version column, which SQLite's type
// affinity leaves as text when a producer wrote something that is not a
// number ('v2'): that row breaks the table contract.
func schemaVersion(v any) (int, error) {
	switch x := v.(type) {
	case int64:
		if x >= math.MinInt32 && x <= math.MaxInt32 {
			return int(x), nil
		}
	case float64:
		if x == math.Trunc(x) && x >= math.MinInt32 && x <= math.MaxInt32 {
			return int(x), nil
		}
	}
	return 0, driver.BadRow("schema_version is not an integer: it holds %q; use 0 or a positive version", fmt.Sprint(v))
}

// now reads the database clock once, in µs.
func (s *Store) now(ctx context.Context) (int64, error) {
	var now int64
	err := s.db.QueryRowContext(ctx, "SELECT "+nowUS).Scan(&now)
	return now, err
}

// leaseCheck is the compare-and-swap every state change does.
const leaseCheck = " AND status = 'SENDING' AND lease_owner = ?2 AND lease_epoch = ?3"

// liveLease adds that the lease has not run out and that no other relay
// holds the shard (all but Ack): once another relay took the shard over, a
// stalled holder can neither renew nor give back an event. Its claims run
// out as they are, and the new holder, which never claims while one of
// them is live, takes them over in each key's order (otherwise the old
// holder could give a key's first event back after the new one's claim
// had read past it, and the key's later, expired event would go first).
func (s *Store) liveLease() string {
	return leaseCheck + " AND lease_until > " + nowUS + " AND NOT EXISTS (SELECT 1 FROM " + s.shardsTable() + " WHERE shard = 0 AND owner <> '' AND owner <> ?2)"
}

const inIDs = "id IN (SELECT value FROM json_each(?1))"

// leased runs a compare-and-swap statement and reports ErrLeaseLost when it
// changed fewer than want rows.
func (s *Store) leased(op string, res sql.Result, err error, want int) error {
	if err != nil {
		return wrap(op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return wrap(op, err)
	}
	if int(n) < want {
		return fmt.Errorf("sqlitestore: %s: %d of %d events: %w", op, want-int(n), want, driver.ErrLeaseLost)
	}
	return nil
}

// Extend renews the lease on ids until now+d (database clock).
func (s *Store) Extend(ctx context.Context, p driver.ExtendParams) (time.Time, error) {
	lease, ids, d := p.Lease, p.IDs, p.For
	if len(ids) == 0 {
		return time.Time{}, nil
	}
	var until []int64
	err := s.query(ctx, "UPDATE "+s.table+" SET lease_until = "+nowUS+" + ?4 WHERE "+inIDs+s.liveLease()+" RETURNING lease_until", func(rows *sql.Rows) error {
		var u int64
		err := rows.Scan(&u)
		until = append(until, u)
		return err
	}, idsJSON(ids), lease.Owner, lease.Epoch, d.Microseconds())
	if err != nil {
		return time.Time{}, wrap("extend", err)
	}
	if len(until) < len(ids) {
		return time.Time{}, fmt.Errorf("sqlitestore: extend: %d of %d events: %w", len(ids)-len(until), len(ids), driver.ErrLeaseLost)
	}
	return micros(until[0]), nil
}

// archiveCols are copied from the outbox to the archive on Ack.
const archiveCols = "id, event_id, topic, event_key, event_type, aggregate_type, schema_version, payload, content_type, headers, attempts, next_attempt_at, last_error, lease_owner, lease_epoch, lease_until, created_at"

// Ack deletes ids, or with KeepSent moves them to the archive as SENT (an
// INSERT … SELECT and a DELETE in one transaction). Like on
// PostgreSQL an expired lease may still ack: the broker confirmed.
func (s *Store) Ack(ctx context.Context, p driver.AckParams) error {
	lease, ids := p.Lease, p.IDs
	if len(ids) == 0 {
		return nil
	}
	where := " WHERE " + inIDs + leaseCheck
	del := "DELETE FROM " + s.table + where + " RETURNING event_key"
	args := []any{idsJSON(ids), lease.Owner, lease.Epoch}
	if !s.opts.KeepSent {
		return s.deleteAcked(ctx, del, len(ids), args)
	}
	return s.ackToArchive(ctx, "INSERT INTO "+s.archive+" ("+archiveCols+", status, sent_at) SELECT "+archiveCols+", 'SENT', "+nowUS+" FROM "+s.table+where, del, len(ids), args)
}

// AckClaim acks every event of the claim lease (driver.Driver): one
// statement finds them by (owner, epoch) through the in-flight index, so no
// id list is sent. ErrLeaseLost when fewer than n are still held.
func (s *Store) AckClaim(ctx context.Context, p driver.AckClaimParams) error {
	lease, n := p.Lease, p.N
	where := " INDEXED BY " + quote(s.opts.Table+"_sending_idx") + " WHERE status = 'SENDING' AND lease_owner = ?1 AND lease_epoch = ?2"
	del := "DELETE FROM " + s.table + where + " RETURNING event_key"
	args := []any{lease.Owner, lease.Epoch}
	if !s.opts.KeepSent {
		return s.deleteAcked(ctx, del, n, args)
	}
	return s.ackToArchive(ctx, "INSERT INTO "+s.archive+" ("+archiveCols+", status, sent_at) SELECT "+archiveCols+", 'SENT', "+nowUS+" FROM "+s.table+where, del, n, args)
}

// deleteAcked runs an ack's DELETE … RETURNING event_key and unparks the
// next rows of the keys it acked (in the same write, under the gate).
func (s *Store) deleteAcked(ctx context.Context, del string, want int, args []any) error {
	var k keyed
	err := s.query(ctx, del, k.scan, args...)
	if err != nil {
		return wrap("ack", err)
	}
	s.unparkKeys(ctx, k.keys)
	if k.n < want {
		return fmt.Errorf("sqlitestore: ack: %d of %d events: %w", want-k.n, want, driver.ErrLeaseLost)
	}
	return nil
}

// unparkKeys unparks the lowest parked rows of keys under the write gate.
// A failure is not reported: parking is a cache, and Balance's sweep
// unparks what is left behind.
func (s *Store) unparkKeys(ctx context.Context, keys []string) {
	if len(keys) == 0 {
		return
	}
	guard, err := s.stmt(ctx, s.anyParkedSQL())
	if err != nil {
		return
	}
	var some bool
	if err := guard.QueryRowContext(ctx).Scan(&some); err != nil || !some {
		return
	}
	js, err := json.Marshal(keys)
	if err != nil {
		return
	}
	_, _ = s.exec(ctx, s.unparkSQL(), string(js), unparkBound)
}

// quote double-quotes a name; names are validated: [a-z_][a-z0-9_]*.
func quote(name string) string { return `"` + name + `"` }

// ackToArchive copies the held rows to the archive and deletes them, in one
// transaction under the write gate. Its first statement writes, so even a
// deferred transaction takes the write lock before reading anything.
func (s *Store) ackToArchive(ctx context.Context, copySQL, del string, want int, args []any) error {
	ins, err := s.stmt(ctx, copySQL)
	if err != nil {
		return wrap("ack", err)
	}
	rm, err := s.stmt(ctx, del)
	if err != nil {
		return wrap("ack", err)
	}
	if err := s.gate.lock(ctx); err != nil {
		return wrap("ack", err)
	}
	defer s.gate.unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return wrap("ack", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.StmtContext(ctx, ins).ExecContext(ctx, args...); err != nil {
		return wrap("ack", err)
	}
	var k keyed
	rows, err := tx.StmtContext(ctx, rm).QueryContext(ctx, args...)
	if err != nil {
		return wrap("ack", err)
	}
	for rows.Next() {
		if err := k.scan(rows); err != nil {
			rows.Close()
			return wrap("ack", err)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return wrap("ack", err)
	}
	var lost error
	if k.n < want {
		lost = fmt.Errorf("sqlitestore: ack: %d of %d events: %w", want-k.n, want, driver.ErrLeaseLost)
	}
	if err := s.unpark(ctx, tx, k.keys); err != nil {
		return wrap("ack", err)
	}
	if err := tx.Commit(); err != nil {
		return wrap("ack", err)
	}
	return lost // the held ones are acked all the same
}

// Retry gives events back for a later attempt. The lease must still be live.
func (s *Store) Retry(ctx context.Context, p driver.RetryParams) error {
	lease, retries := p.Lease, p.Retries
	if len(retries) == 0 {
		return nil
	}
	rows := make([][3]any, len(retries))
	for i, r := range retries {
		rows[i] = [3]any{r.ID, max(r.Delay, 0).Microseconds(), driver.CleanError(r.Error)}
	}
	js, err := json.Marshal(rows)
	if err != nil {
		return fmt.Errorf("sqlitestore: retry: %w", err)
	}
	query := "UPDATE " + s.table + " SET status = 'NEW', attempts = min(attempts, 2147483646) + 1, next_attempt_at = " + nowUS + " + u.delay_us, last_error = u.err, lease_owner = '', lease_until = NULL " +
		"FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS delay_us, json_extract(value, '$[2]') AS err FROM json_each(?1)) AS u " +
		"WHERE " + s.table + ".id = u.id" + s.liveLease()
	res, err := s.exec(ctx, query, string(js), lease.Owner, lease.Epoch)
	return s.leased("retry", res, err, len(retries))
}

// Bury marks events DEAD with their reason. The lease must still be live.
func (s *Store) Bury(ctx context.Context, p driver.BuryParams) error {
	lease, burials := p.Lease, p.Burials
	if len(burials) == 0 {
		return nil
	}
	rows := make([][2]any, len(burials))
	for i, b := range burials {
		rows[i] = [2]any{b.ID, driver.CleanError(b.Error)}
	}
	js, err := json.Marshal(rows)
	if err != nil {
		return fmt.Errorf("sqlitestore: bury: %w", err)
	}
	// A buried row no longer holds its key when the relay moves on past
	// dead keys: its key's parked rows are unparked, and the next claim
	// parks them again if the relay holds dead keys.
	query := "UPDATE " + s.table + " SET status = 'DEAD', attempts = min(attempts, 2147483646) + 1, last_error = u.err, lease_owner = '', lease_until = NULL " +
		"FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS err FROM json_each(?1)) AS u " +
		"WHERE " + s.table + ".id = u.id" + s.liveLease() + " RETURNING event_key"
	var k keyed
	if err := s.query(ctx, query, k.scan, string(js), lease.Owner, lease.Epoch); err != nil {
		return wrap("bury", err)
	}
	s.unparkKeys(ctx, k.keys)
	if k.n < len(burials) {
		return fmt.Errorf("sqlitestore: bury: %d of %d events: %w", len(burials)-k.n, len(burials), driver.ErrLeaseLost)
	}
	return nil
}

// Release gives events back untouched. The lease must still be live.
func (s *Store) Release(ctx context.Context, p driver.ReleaseParams) error {
	lease, ids := p.Lease, p.IDs
	if len(ids) == 0 {
		return nil
	}
	query := "UPDATE " + s.table + " SET status = 'NEW', lease_owner = '', lease_until = NULL, parked = 0 WHERE " + inIDs + s.liveLease()
	res, err := s.exec(ctx, query, idsJSON(ids), lease.Owner, lease.Epoch)
	return s.leased("release", res, err, len(ids))
}

type scanner interface{ Scan(dest ...any) error }

func scanRecord(row scanner) (store.Record, error) {
	var r store.Record
	var headers []byte
	var status string
	// what a producer wrote, whatever its type (values.go): a row is
	// shown whatever its columns hold
	var version, attempts, created, next, until, sent any
	err := row.Scan(&r.ID, &r.EventID, &r.Topic, &r.Key, &r.Type, &r.AggregateType, &version, &r.Payload, &r.ContentType, &headers, &attempts, &created,
		&status, &r.LastError, &next, &r.LeaseOwner, &until, &sent, &r.PayloadSize)
	if err != nil {
		return r, err
	}
	r.SchemaVersion, _ = schemaVersion(version) // 0 when not a number: the row is still shown
	r.Attempts = looseInt(attempts)
	r.Status = outbox.Status(status)
	r.CreatedAt, r.NextAttemptAt = looseMicros(created), looseMicros(next)
	r.LeaseUntil, r.SentAt = looseMicros(until), looseMicros(sent)
	// A row whose headers break the contract is still shown (its
	// last_error says why once a claim buried it), without headers.
	r.Headers, _ = driver.DecodeHeaders(headers)
	return r, nil
}

// Get returns one event from the outbox or the archive.
func (s *Store) Get(ctx context.Context, id int64) (store.Record, error) {
	r, err := scanRecord(s.db.QueryRowContext(ctx, "SELECT "+recordCols+" FROM "+s.table+" WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		r, err = scanRecord(s.db.QueryRowContext(ctx, "SELECT "+recordCols+" FROM "+s.archive+" WHERE id = ?", id))
	}
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("sqlitestore: event %d: %w", id, store.ErrNotFound)
	}
	return r, wrap("get", err)
}

var _ store.PayloadReader = (*Store)(nil)

// ReadPayload returns n bytes of event id's payload from offset on.
func (s *Store) ReadPayload(ctx context.Context, id int64, offset, n int) ([]byte, error) {
	b := []byte{}
	err := s.db.QueryRowContext(ctx, "SELECT substr(CAST(payload AS BLOB), ?2, ?3) FROM "+s.table+" WHERE id = ?1 UNION ALL SELECT substr(CAST(payload AS BLOB), ?2, ?3) FROM "+s.archive+" WHERE id = ?1 LIMIT 1", id, offset+1, n).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlitestore: event %d: %w", id, store.ErrNotFound)
	}
	return b, wrap("read payload", err)
}

// deadFilter takes ?1 topic, ?2 key, ?3 a JSON array of ids.
const deadFilter = " WHERE status = 'DEAD' AND (?1 = '' OR topic = ?1) AND (?2 = '' OR event_key = ?2) AND (?3 = '[]' OR id IN (SELECT value FROM json_each(?3)))"

// ListDead lists DEAD events in id order.
func (s *Store) ListDead(ctx context.Context, q store.DeadQuery) ([]store.Record, error) {
	if q.Limit <= 0 {
		q.Limit = driver.DefaultLimit
	}
	rows, err := s.db.QueryContext(ctx, "SELECT "+previewCols+" FROM "+s.table+deadFilter+" AND id > ?4 ORDER BY id LIMIT ?5",
		q.Topic, q.Key, idsJSON(q.IDs), q.After(), q.Limit)
	if err != nil {
		return nil, wrap("list dead", err)
	}
	defer rows.Close()
	var out []store.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, wrap("list dead", err)
		}
		out = append(out, r)
	}
	return out, wrap("list dead", rows.Err())
}

// RequeueDead turns matching DEAD events back into NEW with attempts 0.
func (s *Store) RequeueDead(ctx context.Context, q store.DeadQuery) (int64, error) {
	var k keyed
	err := s.query(ctx, "UPDATE "+s.table+" SET status = 'NEW', attempts = 0, next_attempt_at = "+nowUS+", lease_owner = '', lease_until = NULL, parked = 0"+deadFilter+" RETURNING event_key",
		k.scan, q.Topic, q.Key, idsJSON(q.IDs))
	if err != nil {
		return 0, wrap("requeue dead", err)
	}
	s.unparkKeys(ctx, k.keys)
	n := int64(k.n)
	if n > 0 {
		s.signal()
	}
	return n, nil
}

// Purge deletes SENT (archived) or DEAD events older than req.OlderThan in
// batches of req.BatchSize, one short write transaction each, so enqueuers
// and relays get the write lock in between.
func (s *Store) Purge(ctx context.Context, req store.PurgeRequest) (int64, error) {
	req = req.WithDefaults()
	err := req.Validate()
	if err != nil {
		return 0, err
	}
	var query string
	switch req.Status {
	case outbox.StatusSent:
		query = "DELETE FROM " + s.archive + " WHERE id IN (SELECT id FROM " + s.archive + " WHERE sent_at < " + nowUS + " - ?1 LIMIT ?2)"
	case outbox.StatusDead:
		query = "DELETE FROM " + s.table + " WHERE id IN (SELECT id FROM " + s.table + " WHERE status = 'DEAD' AND created_at < " + nowUS + " - ?1 AND (?3 = '' OR topic = ?3) AND (?4 = '' OR event_key = ?4) AND (?5 = '[]' OR id IN (SELECT value FROM json_each(?5))) LIMIT ?2)"
	default:
		return 0, fmt.Errorf("sqlitestore: purge: status must be SENT or DEAD, not %q", req.Status)
	}
	args := []any{req.OlderThan.Microseconds(), req.BatchSize}
	if req.Status == outbox.StatusDead {
		args = append(args, req.Topic, req.Key, idsJSON(req.IDs))
	}
	var total int64
	for {
		var k keyed
		if req.Status == outbox.StatusDead {
			// the keys a purge frees get their parked rows back
			if err := s.query(ctx, query+" RETURNING event_key", k.scan, args...); err != nil {
				return total, wrap("purge", err)
			}
			s.unparkKeys(ctx, k.keys)
		} else {
			res, err := s.exec(ctx, query, args...)
			if err != nil {
				return total, wrap("purge", err)
			}
			m, err := res.RowsAffected()
			if err != nil {
				return total, wrap("purge", err)
			}
			k.n = int(m)
		}
		n := int64(k.n)
		total += n
		if n < int64(req.BatchSize) {
			return total, nil
		}
	}
}

// Stats counts events by state.
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	var st store.Stats
	var oldestUS float64 // a real when the difference leaves SQLite's integers
	err := s.db.QueryRowContext(ctx, `SELECT
	count(*) FILTER (WHERE status = 'NEW'),
	count(*) FILTER (WHERE status = 'SENDING'),
	count(*) FILTER (WHERE status = 'DEAD'),
	count(*) FILTER (WHERE status = 'NEW' AND attempts > 0),
	count(*) FILTER (WHERE status = 'SENDING' AND `+leaseExpired("", nowUS)+`),
	count(DISTINCT event_key) FILTER (WHERE status = 'DEAD' AND event_key <> ''),
	count(*) FILTER (WHERE status = 'NEW' AND (typeof(next_attempt_at) <> 'integer' OR next_attempt_at >= `+nowUS+` + `+yearUS+`)),
	COALESCE(`+nowUS+` - min(created_at) FILTER (WHERE status <> 'DEAD' AND typeof(created_at) = 'integer'), 0)
FROM `+s.table).Scan(&st.New, &st.Sending, &st.Dead, &st.Retrying, &st.ExpiredLeases, &st.BlockedKeys, &st.HeldForGood, &oldestUS)
	if err != nil {
		return st, wrap("stats", err)
	}
	st.OldestPending = store.AgeOf(oldestUS / 1e6)
	if s.opts.KeepSent {
		if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM "+s.archive).Scan(&st.Sent); err != nil {
			return st, wrap("stats", err)
		}
	}
	return st, nil
}

// wrap adds context and turns "no such table" into ErrNotMigrated.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if strings.HasPrefix(err.Error(), "sqlitestore: ") {
		return err
	}
	if strings.Contains(err.Error(), "no such table") {
		return fmt.Errorf("sqlitestore: %s: %w", op, store.ErrNotMigrated)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlitestore: %s: %w", op, store.ErrNotFound)
	}
	return fmt.Errorf("sqlitestore: %s: %w", op, err)
}
