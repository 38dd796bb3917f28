package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
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

	claimSQL, claimHoldDeadSQL string

	mu      sync.Mutex
	wakeups store.Wakeups
	closed  bool
	watch   watcher // notify.go
}

var _ store.Store = (*Store)(nil)
var _ store.Notifier = (*Store)(nil)

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
	opts, err := cfg.Options.Normalize()
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
	s.claimSQL = s.buildClaimSQL(false)
	s.claimHoldDeadSQL = s.buildClaimSQL(true)
	return s, nil
}

// quote quotes a name already checked by store.ValidateName (no backticks).
func quote(name string) string { return "`" + name + "`" }

// Open connects to url (mysql://user:pass@host:3306/db?param=…, see DSN)
// with a pool of its own, closed by Close.
func Open(ctx context.Context, url string, cfg Config) (*Store, error) {
	if _, err := cfg.Options.Normalize(); err != nil {
		return nil, err
	}
	mc, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	if mc.DBName == "" && cfg.Schema == "" {
		return nil, errors.New("mysqlstore: the database URL names no database; " + urlForm + " (or set Config.Schema)")
	}
	connector, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: bad database URL: %w", err)
	}
	db := sql.OpenDB(connector)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		var me *mysql.MySQLError
		switch {
		case errors.As(err, &me) && me.Number == errBadDB:
			return nil, fmt.Errorf("mysqlstore: database %q does not exist on %s: create it (CREATE DATABASE %s) or fix the URL", mc.DBName, mc.Addr, quote(mc.DBName))
		case errors.As(err, &me):
			return nil, fmt.Errorf("mysqlstore: %s refused the connection: %w", mc.Addr, err)
		}
		return nil, fmt.Errorf("mysqlstore: cannot reach %s: %w", mc.Addr, err)
	}
	s, err := New(db, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.ownDB = true
	return s, nil
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
	if s.ownDB {
		return s.db.Close()
	}
	return nil
}

// lockName is the name of a server-wide GET_LOCK lock of this table:
// arguments schema (or NULL for the connection's database), table, purpose.
// Hashed because MySQL refuses names longer than 64 characters.
const lockName = "CONCAT('outbox:', SHA1(CONCAT_WS('.', COALESCE(?, DATABASE()), ?, ?)))"

// How long GET_LOCK waits when ctx has no deadline. A claim holds its lock
// for two short statements; a migration for its DDL.
const (
	claimLockWait   = 30 * time.Second
	migrateLockWait = 5 * time.Minute
)

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
	_ = l.conn.Raw(func(any) error { return driver.ErrBadConn })
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

// Migrate creates or upgrades the schema under a GET_LOCK, so several
// processes may migrate at once.
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
	for i, m := range migrations(s.table, s.archive, s.opts.Table) {
		v := i + 1
		if v <= current {
			continue
		}
		for _, stmt := range m {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("mysqlstore: migration %d: %w", v, err)
			}
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO "+s.migrations+" (version) VALUES (?)", v); err != nil {
			return fmt.Errorf("mysqlstore: migration %d: %w", v, err)
		}
	}
	return nil
}

// Limits of one INSERT: MySQL's 65535 placeholders of a prepared statement
// (11 per row at most), and a byte budget well under the server's
// max_allowed_packet (16 MiB by default on MariaDB, 64 MiB on MySQL) even
// when the driver escapes every byte of a payload.
const (
	maxRowsPerInsert  = 5000
	maxBytesPerInsert = 4 << 20
)

// TIMESTAMP's range ends in 2038: a later AvailableAt is stored as its end.
var maxTimestamp = time.Unix(math.MaxInt32, 0)

const insertPrefix = " (event_id, topic, event_key, event_type, aggregate_type, schema_version, payload, content_type, headers, next_attempt_at) VALUES "

// buildInsert returns the statements and arguments that write msgs (already
// validated and normalized), in input order: InnoDB gives the rows of one
// INSERT increasing ids in VALUES order, and later statements higher ones.
func (s *Store) buildInsert(msgs []outbox.Message) (stmts []string, args [][]any) {
	for start := 0; start < len(msgs); {
		var b strings.Builder
		b.WriteString("INSERT INTO ")
		b.WriteString(s.table)
		b.WriteString(insertPrefix)
		a := make([]any, 0, min(len(msgs)-start, maxRowsPerInsert)*11)
		bytes, n := 0, 0
		for start+n < len(msgs) && n < maxRowsPerInsert {
			m := msgs[start+n]
			size := len(m.Payload) + len(m.Topic) + len(m.Key) + len(m.Type) + len(m.AggregateType) + 256
			headers := store.EncodeHeaders(m.Headers)
			size += len(headers)
			if n > 0 && bytes+size > maxBytesPerInsert {
				break
			}
			if n > 0 {
				b.WriteByte(',')
			}
			a = append(a, strings.ToLower(m.EventID), m.Topic, m.Key, m.Type, m.AggregateType, m.SchemaVersion, m.Payload, m.ContentType, headers)
			switch at := m.AvailableAt; {
			case at.IsZero() || at.Unix() < 1:
				b.WriteString("(?,?,?,?,?,?,?,?,?,DEFAULT)")
			default:
				if at.After(maxTimestamp) {
					at = maxTimestamp
				}
				// An epoch, not a time.Time: the driver would format a
				// time.Time in its loc, which the server reads in the
				// session's time zone, and the two need not agree.
				b.WriteString("(?,?,?,?,?,?,?,?,?,FROM_UNIXTIME(?) + INTERVAL ? MICROSECOND)")
				a = append(a, at.Unix(), at.Nanosecond()/1000)
			}
			bytes += size
			n++
		}
		stmts = append(stmts, b.String())
		args = append(args, a)
		start += n
	}
	return stmts, args
}

// Enqueue writes msgs atomically: one autocommitted INSERT, or a transaction
// of its own when msgs need several.
func (s *Store) Enqueue(ctx context.Context, msgs ...outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	norm, err := s.opts.Prepare(msgs)
	if err != nil {
		return err
	}
	stmts, args := s.buildInsert(norm)
	if len(stmts) == 1 {
		if _, err := s.db.ExecContext(ctx, stmts[0], args[0]...); err != nil {
			return wrap("enqueue", err)
		}
		s.signal()
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return wrap("enqueue", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	for i := range stmts {
		if _, err := tx.ExecContext(ctx, stmts[i], args[i]...); err != nil {
			return wrap("enqueue", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return wrap("enqueue", err)
	}
	s.signal()
	return nil
}

// EnqueueTx writes msgs with the caller's *sql.Tx (or *sql.Conn/*sql.DB):
// they commit or roll back with it. On a validation error nothing is sent.
func (s *Store) EnqueueTx(ctx context.Context, tx store.Execer, msgs ...outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	norm, err := s.opts.Prepare(msgs)
	if err != nil {
		return err
	}
	stmts, args := s.buildInsert(norm)
	for i := range stmts {
		if _, err := tx.ExecContext(ctx, stmts[i], args[i]...); err != nil {
			return wrap("enqueue", err)
		}
	}
	s.signalAfterTx()
	return nil
}

// Columns as read back. Times are read as UNIX_TIMESTAMP(column): for a
// TIMESTAMP column that is its stored UTC value, whatever the session's
// time_zone and the driver's parseTime/loc.
var eventCols = []string{"id", "event_id", "topic", "event_key", "event_type", "aggregate_type", "schema_version", "payload", "content_type", "headers", "attempts", "UNIX_TIMESTAMP(%screated_at)"}
var recordCols = append(eventCols[:len(eventCols):len(eventCols)], "status", "last_error", "UNIX_TIMESTAMP(%snext_attempt_at)", "lease_owner", "UNIX_TIMESTAMP(%slease_until)", "UNIX_TIMESTAMP(%ssent_at)")

func cols(list []string, prefix string) string {
	out := make([]string, len(list))
	for i, c := range list {
		if strings.Contains(c, "%s") {
			out[i] = fmt.Sprintf(c, prefix)
		} else {
			out[i] = prefix + c
		}
	}
	return strings.Join(out, ", ")
}

// dbNow is the database clock in microseconds since the epoch. UNIX_TIMESTAMP()
// and NOW(6) both read the statement's start time; neither depends on the
// session's time zone (MICROSECOND of a local time equals that of UTC).
const dbNow = "UNIX_TIMESTAMP() * 1000000 + MICROSECOND(NOW(6))"

// claimable: a NEW event that is due, or a SENDING one whose lease ran out.
const claimable = "((%[1]sstatus = 'NEW' AND %[1]snext_attempt_at <= NOW(6)) OR (%[1]sstatus = 'SENDING' AND %[1]slease_until <= NOW(6) - " + takeoverGrace + "))"

// takeoverGrace: a claim takes over only leases that expired longer ago
// than this, and a key stays held by an in-flight event that long after its
// lease ran out. A fenced write (retry, release, extend) checks its lease at
// its statement's start and then holds the row's lock; the grace keeps a
// claim from reading that row's lease as expired and taking the key's next
// event while the first is being put back. (pgstore also bounds those
// statements' run time; MySQL has no portable per-statement timeout for
// UPDATE, so here the grace alone makes the window a stall of more than
// 250 ms inside one short statement.)
const takeoverGrace = "INTERVAL 250000 MICROSECOND"

// forceHoldIdx is the hint that makes a query use the hold index, which
// leads with status and so also finds the in-flight rows.
func (s *Store) forceHoldIdx() string { return " FORCE INDEX (" + s.opts.Table + "_hold_idx)" }

// buildClaimSQL selects the events a claim takes: claimable, in id order,
// whose key is not held — exactly pgstore's rules. A key is held by a SENDING
// event under a live lease (all its events), with HoldDeadKeys by an earlier
// DEAD event, and by an earlier NEW event waiting for a retry or a delayed
// AvailableAt (hold_key is set only on those, see the schema).
//
// Each probe is a lookup on (status, hold_key) that reads just the holding
// rows of that key. "An earlier holding row" is written as MIN(id) < o.id so
// the subquery depends on the key alone: MariaDB then answers the rows of a
// key from its subquery cache, which matters when the walk passes a long
// held backlog of one key (EXPLAIN ANALYZE: 100k held rows, 2.0 s with
// per-row EXISTS, 0.7 s with this form; 1000 unheld rows of 400k: 40 ms).
// The index hints pin the plan those EXPLAINs showed: the walk in
// primary-key order, stopping after LIMIT rows, and the probes on the hold
// index; the probes sit under OR so neither optimizer turns them into joins
// over the whole table.
func (s *Store) buildClaimSQL(holdDead bool) string {
	hold := "FROM " + s.table + " h" + s.forceHoldIdx() + " WHERE h.hold_key = o.event_key AND "
	dead := ""
	if holdDead {
		dead = "\n\t\tOR IFNULL((SELECT MIN(h.id) " + hold + "h.status = 'DEAD'), o.id) < o.id"
	}
	return "SELECT " + cols(eventCols, "o.") + ", " + dbNow + `
FROM ` + s.table + ` o FORCE INDEX (PRIMARY)
WHERE ` + fmt.Sprintf(claimable, "o.") + `
  AND (o.event_key = '' OR NOT (
		EXISTS (SELECT 1 ` + hold + `h.status = 'SENDING' AND h.lease_until > NOW(6) - ` + takeoverGrace + `)` + dead + `
		OR IFNULL((SELECT MIN(h.id) ` + hold + `h.status = 'NEW' AND h.next_attempt_at > NOW(6)), o.id) < o.id))
ORDER BY o.id
LIMIT ?`
}

type scanner interface{ Scan(dest ...any) error }

// scanEvent reads one row into e. broken is why the row breaks the table
// contract (its headers cannot be decoded; e.Headers is then nil): the row
// was read, and the caller decides what to do with it.
func scanEvent(row scanner, e *outbox.Event, extra ...any) (broken, err error) {
	var headers []byte
	var created sql.NullString
	dest := append([]any{&e.ID, &e.EventID, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.SchemaVersion, &e.Payload, &e.ContentType, &headers, &e.Attempts, &created}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	if e.CreatedAt, err = epoch(created); err != nil {
		return nil, err
	}
	if e.Payload == nil {
		e.Payload = []byte{}
	}
	e.Headers, broken = store.DecodeHeaders(headers)
	return broken, nil
}

// epoch parses UNIX_TIMESTAMP's decimal text ("1700000000.123456"); NULL and
// 0 (MySQL's zero timestamp) are the zero time.
func epoch(v sql.NullString) (time.Time, error) {
	if !v.Valid {
		return time.Time{}, nil
	}
	secText, frac, _ := strings.Cut(v.String, ".")
	sec, err := strconv.ParseInt(secText, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("mysqlstore: bad timestamp %q", v.String)
	}
	var nsec int64
	if frac != "" {
		frac = (frac + "000000000")[:9]
		if nsec, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return time.Time{}, fmt.Errorf("mysqlstore: bad timestamp %q", v.String)
		}
	}
	if sec == 0 && nsec == 0 {
		return time.Time{}, nil
	}
	return time.Unix(sec, nsec), nil
}

// Claim takes up to req.Limit ready events in id order under a new lease.
//
// Claims of one table are serialized by a GET_LOCK held on a dedicated
// connection for two autocommitted statements: a plain (non-locking) SELECT
// of the candidates, which sees every committed claim because it starts after
// the previous holder's UPDATE committed, and an UPDATE by primary key that
// re-checks claimability, so an event acked or changed in between is
// skipped. Four round trips: GET_LOCK, SELECT, UPDATE, and RELEASE_LOCK
// together with reading the stored lease expiry. No row lock is held between
// statements, so nothing a claim does can stall another relay's ack or retry.
func (s *Store) Claim(ctx context.Context, req store.ClaimRequest) (store.Claim, error) {
	req = req.Normalize()
	c := store.Claim{Lease: req.Lease}
	l, err := s.lock(ctx, "claim", claimLockWait)
	if err != nil {
		return c, wrap("claim", err)
	}
	defer l.unlock("", nil) //nolint:errcheck // a failed release discards the connection, which releases the lock
	conn := l.conn

	q := s.claimSQL
	if req.HoldDeadKeys {
		q = s.claimHoldDeadSQL
	}
	rows, err := conn.QueryContext(ctx, q, req.Limit)
	if err != nil {
		return c, wrap("claim", err)
	}
	var events []outbox.Event
	var now int64
	var bad map[int64]error // rows that cannot be decoded, by id: claimed, then buried
	for rows.Next() {
		var e outbox.Event
		broken, err := scanEvent(rows, &e, &now)
		if err != nil {
			rows.Close()
			return c, wrap("claim", err)
		}
		if broken != nil {
			if bad == nil {
				bad = map[int64]error{}
			}
			bad[e.ID] = broken
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return c, wrap("claim", err)
	}
	if len(events) == 0 {
		return c, nil
	}

	ids := make([]int64, len(events))
	for i := range events {
		ids[i] = events[i].ID
	}
	var changed int64
	for _, part := range chunks(ids, maxIDsPerStatement) {
		args := []any{req.Lease.Owner, req.Lease.Epoch, req.LeaseFor.Microseconds()}
		res, err := conn.ExecContext(ctx, "UPDATE "+s.table+byID+" SET status = 'SENDING', lease_owner = ?, lease_epoch = ?, lease_until = NOW(6) + INTERVAL ? MICROSECOND WHERE id IN ("+marks(len(part))+") AND "+fmt.Sprintf(claimable, ""), appendIDs(args, part)...)
		if err != nil {
			return c, wrap("claim", err)
		}
		n, _ := res.RowsAffected()
		changed += n
	}
	if changed < int64(len(ids)) {
		// Rare: some candidates changed between the SELECT and the UPDATE
		// (acked by a relay whose lease had run out, say). Keep the ones
		// this lease now holds.
		held := map[int64]bool{}
		for _, part := range chunks(ids, maxIDsPerStatement) {
			rows, err := conn.QueryContext(ctx, "SELECT id FROM "+s.table+byID+" WHERE id IN ("+marks(len(part))+") AND status = 'SENDING' AND lease_owner = ? AND lease_epoch = ?", append(appendIDs(nil, part), req.Lease.Owner, req.Lease.Epoch)...)
			if err != nil {
				return c, wrap("claim", err)
			}
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return c, wrap("claim", err)
				}
				held[id] = true
			}
			if err := rows.Err(); err != nil {
				return c, wrap("claim", err)
			}
		}
		kept := events[:0]
		for _, e := range events {
			if held[e.ID] {
				kept = append(kept, e)
			}
		}
		events = kept
		if len(events) == 0 {
			return c, nil
		}
	}
	c.Events = events // already in id order
	// Release the lock and read the lease_until the UPDATE stored in one
	// round trip. Should that fail, the SELECT's clock plus LeaseFor is a
	// safe stand-in: a little before the stored expiry, never after it.
	var until sql.NullString
	c.Until = time.UnixMicro(now + req.LeaseFor.Microseconds())
	err = l.unlock(", (SELECT UNIX_TIMESTAMP(lease_until) FROM "+s.table+" WHERE id = ? AND lease_owner = ? AND lease_epoch = ?)",
		[]any{events[0].ID, req.Lease.Owner, req.Lease.Epoch}, &until)
	if t, terr := epoch(until); err == nil && terr == nil && !t.IsZero() {
		c.Until = t
	}
	if c.Events, err = store.Screen(ctx, c.Lease, c.Events, bad, req.HoldDeadKeys, s.Bury, s.Release); err != nil {
		return store.Claim{Lease: req.Lease}, fmt.Errorf("mysqlstore: claim: %w", err)
	}
	return c, nil
}

// maxIDsPerStatement keeps id lists well under the placeholder limit.
const maxIDsPerStatement = 10000

func chunks(ids []int64, size int) [][]int64 {
	var out [][]int64
	for len(ids) > size {
		out = append(out, ids[:size])
		ids = ids[size:]
	}
	return append(out, ids)
}

func marks(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?,", n-1) + "?"
}

func appendIDs(args []any, ids []int64) []any {
	for _, id := range ids {
		args = append(args, id)
	}
	return args
}

// byID follows a table name in statements that address rows by id: with
// few SENDING rows the optimizers may otherwise prefer the hold index's
// status='SENDING' range, which at REPEATABLE READ would lock every
// in-flight row of every relay for the statement. Single-table DELETE takes
// no index hint, so Ack uses the multi-table form.
const byID = " FORCE INDEX (PRIMARY)"

// leaseCheck is the compare-and-swap every state change does (arguments
// owner, epoch).
const leaseCheck = " AND status = 'SENDING' AND lease_owner = ? AND lease_epoch = ?"

// leased runs one autocommitted statement per chunk of ids and reports
// ErrLeaseLost when fewer rows than asked were affected. Every statement
// given here changes each row it matches (status or existence), so
// RowsAffected counts matches whether or not the DSN sets clientFoundRows.
func (s *Store) leased(ctx context.Context, op string, want int, build func(ids []int64) (string, []any), ids []int64) error {
	var done int64
	for _, part := range chunks(ids, maxIDsPerStatement) {
		q, args := build(part)
		res, err := s.db.ExecContext(ctx, q, args...)
		if err != nil {
			return wrap(op, err)
		}
		n, _ := res.RowsAffected()
		done += n
	}
	if done < int64(want) {
		return fmt.Errorf("mysqlstore: %s: %d of %d events: %w", op, int64(want)-done, want, store.ErrLeaseLost)
	}
	return nil
}

// Extend renews the lease on ids until now+d (database clock): one UPDATE,
// then a read of the new expiry.
func (s *Store) Extend(ctx context.Context, lease store.Lease, ids []int64, d time.Duration) (time.Time, error) {
	if len(ids) == 0 {
		return time.Time{}, nil
	}
	var changed int64
	for _, part := range chunks(ids, maxIDsPerStatement) {
		args := appendIDs([]any{d.Microseconds()}, part)
		res, err := s.db.ExecContext(ctx, "UPDATE "+s.table+byID+" SET lease_until = NOW(6) + INTERVAL ? MICROSECOND WHERE id IN ("+marks(len(part))+")"+leaseCheck+" AND lease_until > NOW(6)",
			append(args, lease.Owner, lease.Epoch)...)
		if err != nil {
			return time.Time{}, wrap("extend", err)
		}
		n, _ := res.RowsAffected()
		changed += n
	}
	// Without clientFoundRows MySQL counts changed rows only, and a row
	// whose lease_until already had the new value is not "changed": when
	// the count falls short, count the rows still held under a live lease.
	live := ""
	if changed < int64(len(ids)) {
		live = " AND lease_until > NOW(6)"
	}
	var held int64
	var minUntil sql.NullString
	for _, part := range chunks(ids, maxIDsPerStatement) {
		var n int64
		var u sql.NullString
		err := s.db.QueryRowContext(ctx, "SELECT COUNT(*), MIN(UNIX_TIMESTAMP(lease_until)) FROM "+s.table+byID+" WHERE id IN ("+marks(len(part))+")"+leaseCheck+live,
			append(appendIDs(nil, part), lease.Owner, lease.Epoch)...).Scan(&n, &u)
		if err != nil {
			return time.Time{}, wrap("extend", err)
		}
		held += n
		if u.Valid && (!minUntil.Valid || u.String < minUntil.String) {
			minUntil = u
		}
	}
	if held < int64(len(ids)) {
		return time.Time{}, fmt.Errorf("mysqlstore: extend: %d of %d events: %w", int64(len(ids))-held, len(ids), store.ErrLeaseLost)
	}
	return epoch(minUntil)
}

// archiveCols are copied from the outbox to the archive on Ack.
const archiveCols = "id, event_id, topic, event_key, event_type, aggregate_type, schema_version, payload, content_type, headers, attempts, next_attempt_at, last_error, lease_owner, lease_epoch, lease_until, created_at"

// Ack deletes ids, or with KeepSent copies them to the archive as SENT and
// then deletes them. Both are single autocommitted statements, never one
// transaction holding row locks across a pause of this process: if it dies
// between the two, the rows stay SENDING, are claimed again after the lease
// and re-archived over their earlier copy.
func (s *Store) Ack(ctx context.Context, lease store.Lease, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	if s.opts.KeepSent {
		for _, part := range chunks(ids, maxIDsPerStatement) {
			_, err := s.db.ExecContext(ctx, "INSERT INTO "+s.archive+" ("+archiveCols+", status, sent_at) SELECT "+archiveCols+", 'SENT', NOW(6) FROM "+s.table+byID+
				" WHERE id IN ("+marks(len(part))+")"+leaseCheck+" ON DUPLICATE KEY UPDATE "+s.archive+".sent_at = NOW(6)",
				append(appendIDs(nil, part), lease.Owner, lease.Epoch)...)
			if err != nil {
				return wrap("ack", err)
			}
		}
	}
	return s.leased(ctx, "ack", len(ids), func(part []int64) (string, []any) {
		return "DELETE o FROM " + s.table + " o" + byID + " WHERE id IN (" + marks(len(part)) + ")" + leaseCheck,
			append(appendIDs(nil, part), lease.Owner, lease.Epoch)
	}, ids)
}

// AckClaim acks every event of the claim lease (store.ClaimAcker): its rows
// are found by (owner, epoch) among the in-flight ones through the hold
// index, so no id list is sent. ErrLeaseLost when fewer than n are still
// held (the others are acked all the same).
func (s *Store) AckClaim(ctx context.Context, lease store.Lease, n int) error {
	hint := s.forceHoldIdx()
	where := " WHERE status = 'SENDING' AND lease_owner = ? AND lease_epoch = ?"
	if s.opts.KeepSent {
		_, err := s.db.ExecContext(ctx, "INSERT INTO "+s.archive+" ("+archiveCols+", status, sent_at) SELECT "+archiveCols+", 'SENT', NOW(6) FROM "+s.table+hint+
			where+" ON DUPLICATE KEY UPDATE "+s.archive+".sent_at = NOW(6)", lease.Owner, lease.Epoch)
		if err != nil {
			return wrap("ack", err)
		}
	}
	res, err := s.db.ExecContext(ctx, "DELETE o FROM "+s.table+" o"+hint+where, lease.Owner, lease.Epoch)
	if err != nil {
		return wrap("ack", err)
	}
	if done, _ := res.RowsAffected(); done < int64(n) {
		return fmt.Errorf("mysqlstore: ack: %d of %d events: %w", int64(n)-done, n, store.ErrLeaseLost)
	}
	return nil
}

// Retry gives events back for a later attempt. The lease must still be live.
// Per-row delays and errors come from a derived table of UNION ALL rows,
// which MySQL and MariaDB both accept in a multi-table UPDATE; STRAIGHT_JOIN
// makes it drive the join, one primary-key lookup per row.
func (s *Store) Retry(ctx context.Context, lease store.Lease, retries []store.Retry) error {
	if len(retries) == 0 {
		return nil
	}
	retry := make(map[int64]store.Retry, len(retries))
	ids := make([]int64, len(retries))
	for i, r := range retries {
		ids[i] = r.ID
		if _, dup := retry[r.ID]; !dup {
			retry[r.ID] = r
		}
	}
	return s.leased(ctx, "retry", len(ids), func(part []int64) (string, []any) {
		var b strings.Builder
		args := make([]any, 0, len(part)*3+2)
		for i, id := range part {
			if i == 0 {
				b.WriteString("SELECT CAST(? AS SIGNED) AS id, CAST(? AS SIGNED) AS delay_us, CAST(? AS CHAR) AS err")
			} else {
				b.WriteString(" UNION ALL SELECT ?, ?, ?")
			}
			r := retry[id]
			args = append(args, id, max(r.Delay, 0).Microseconds(), store.CleanError(r.Error))
		}
		return "UPDATE (" + b.String() + ") u STRAIGHT_JOIN " + s.table + " t" + byID + " ON t.id = u.id SET t.status = 'NEW', t.attempts = t.attempts + 1, t.next_attempt_at = NOW(6) + INTERVAL u.delay_us MICROSECOND, t.last_error = u.err, t.lease_owner = '', t.lease_until = NULL" +
			" WHERE t.status = 'SENDING' AND t.lease_owner = ? AND t.lease_epoch = ? AND t.lease_until > NOW(6)", append(args, lease.Owner, lease.Epoch)
	}, ids)
}

// Bury marks events DEAD with their reason. The lease must still be live.
func (s *Store) Bury(ctx context.Context, lease store.Lease, burials []store.Burial) error {
	if len(burials) == 0 {
		return nil
	}
	reason := make(map[int64]string, len(burials))
	ids := make([]int64, len(burials))
	for i, b := range burials {
		ids[i] = b.ID
		if _, dup := reason[b.ID]; !dup {
			reason[b.ID] = b.Error
		}
	}
	return s.leased(ctx, "bury", len(ids), func(part []int64) (string, []any) {
		var b strings.Builder
		args := make([]any, 0, len(part)*2+2)
		for i, id := range part {
			if i == 0 {
				b.WriteString("SELECT CAST(? AS SIGNED) AS id, CAST(? AS CHAR) AS err")
			} else {
				b.WriteString(" UNION ALL SELECT ?, ?")
			}
			args = append(args, id, store.CleanError(reason[id]))
		}
		return "UPDATE (" + b.String() + ") u STRAIGHT_JOIN " + s.table + " t" + byID + " ON t.id = u.id SET t.status = 'DEAD', t.attempts = t.attempts + 1, t.last_error = u.err, t.lease_owner = '', t.lease_until = NULL" +
			" WHERE t.status = 'SENDING' AND t.lease_owner = ? AND t.lease_epoch = ? AND t.lease_until > NOW(6)", append(args, lease.Owner, lease.Epoch)
	}, ids)
}

// Release gives events back untouched. The lease must still be live.
func (s *Store) Release(ctx context.Context, lease store.Lease, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	return s.leased(ctx, "release", len(ids), func(part []int64) (string, []any) {
		return "UPDATE " + s.table + byID + " SET status = 'NEW', lease_owner = '', lease_until = NULL WHERE id IN (" + marks(len(part)) + ")" + leaseCheck + " AND lease_until > NOW(6)",
			append(appendIDs(nil, part), lease.Owner, lease.Epoch)
	}, ids)
}

func scanRecord(row scanner, extra ...any) (store.Record, error) {
	var r store.Record
	var status string
	var next, until, sent sql.NullString
	// A row whose headers break the contract is still shown (its
	// last_error says why once a claim buried it), without headers.
	if _, err := scanEvent(row, &r.Event, append([]any{&status, &r.LastError, &next, &r.LeaseOwner, &until, &sent}, extra...)...); err != nil {
		return r, err
	}
	r.Status = outbox.Status(status)
	var err error
	if r.NextAttemptAt, err = epoch(next); err != nil {
		return r, err
	}
	if r.LeaseUntil, err = epoch(until); err != nil {
		return r, err
	}
	r.SentAt, err = epoch(sent)
	return r, err
}

// Get returns one event from the outbox or the archive, in one query (the
// outbox first: during an Ack with KeepSent a row is briefly in both).
func (s *Store) Get(ctx context.Context, id int64) (store.Record, error) {
	var src int
	r, err := scanRecord(s.db.QueryRowContext(ctx, "(SELECT "+cols(recordCols, "")+", 0 AS src FROM "+s.table+" WHERE id = ?) UNION ALL "+
		"(SELECT "+cols(recordCols, "")+", 1 FROM "+s.archive+" WHERE id = ?) ORDER BY src LIMIT 1", id, id), &src)
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("mysqlstore: event %d: %w", id, store.ErrNotFound)
	}
	return r, wrap("get", err)
}

// deadFilter selects DEAD events matching q.
func deadFilter(q store.DeadQuery) (string, []any) {
	where := " WHERE status = 'DEAD'"
	var args []any
	if q.Topic != "" {
		where += " AND topic = ?"
		args = append(args, q.Topic)
	}
	if q.Key != "" {
		where += " AND event_key = ?"
		args = append(args, q.Key)
	}
	if len(q.IDs) > 0 {
		where += " AND id IN (" + marks(len(q.IDs)) + ")"
		args = appendIDs(args, q.IDs)
	}
	return where, args
}

// ListDead lists DEAD events in id order.
func (s *Store) ListDead(ctx context.Context, q store.DeadQuery) ([]store.Record, error) {
	if q.Limit <= 0 {
		q.Limit = store.DefaultLimit
	}
	where, args := deadFilter(q)
	rows, err := s.db.QueryContext(ctx, "SELECT "+cols(recordCols, "")+" FROM "+s.table+where+" AND id > ? ORDER BY id LIMIT ?", append(args, q.AfterID, q.Limit)...)
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
	where, args := deadFilter(q)
	res, err := s.db.ExecContext(ctx, "UPDATE "+s.table+" SET status = 'NEW', attempts = 0, next_attempt_at = NOW(6), lease_owner = '', lease_until = NULL"+where, args...)
	if err != nil {
		return 0, wrap("requeue dead", err)
	}
	n, _ := res.RowsAffected()
	if n > 0 {
		s.signal()
	}
	return n, nil
}

// Purge deletes SENT (archived) or DEAD events older than req.OlderThan in
// autocommitted batches of req.BatchSize.
func (s *Store) Purge(ctx context.Context, req store.PurgeRequest) (int64, error) {
	req, err := req.Normalize()
	if err != nil {
		return 0, err
	}
	var q string
	switch req.Status {
	case outbox.StatusSent:
		q = "DELETE FROM " + s.archive + " WHERE sent_at < NOW(6) - INTERVAL ? MICROSECOND ORDER BY sent_at, id LIMIT ?"
	case outbox.StatusDead:
		q = "DELETE FROM " + s.table + " WHERE status = 'DEAD' AND created_at < NOW(6) - INTERVAL ? MICROSECOND AND (? = '' OR topic = ?) AND (? = '' OR event_key = ?) ORDER BY id LIMIT ?"
	default:
		return 0, fmt.Errorf("mysqlstore: purge: status must be SENT or DEAD, not %q", req.Status)
	}
	args := []any{req.OlderThan.Microseconds(), req.BatchSize}
	if req.Status == outbox.StatusDead {
		args = []any{req.OlderThan.Microseconds(), req.Topic, req.Topic, req.Key, req.Key, req.BatchSize}
	}
	var total int64
	for {
		res, err := s.db.ExecContext(ctx, q, args...)
		if err != nil {
			return total, wrap("purge", err)
		}
		n, _ := res.RowsAffected()
		total += n
		if n < int64(req.BatchSize) {
			return total, nil
		}
	}
}

// Stats counts events by state, in one scan of the outbox (plus a count of
// the archive when sent events are kept).
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	var st store.Stats
	var oldest sql.NullString
	var now int64
	err := s.db.QueryRowContext(ctx, `SELECT
	COALESCE(SUM(CASE WHEN status = 'NEW' THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN status = 'SENDING' THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN status = 'DEAD' THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN status = 'NEW' AND attempts > 0 THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN status = 'SENDING' AND lease_until <= NOW(6) THEN 1 ELSE 0 END), 0),
	COUNT(DISTINCT CASE WHEN status = 'DEAD' AND event_key <> '' THEN event_key END),
	MIN(CASE WHEN status <> 'DEAD' THEN UNIX_TIMESTAMP(created_at) END),
	`+dbNow+`
FROM `+s.table).Scan(&st.New, &st.Sending, &st.Dead, &st.Retrying, &st.ExpiredLeases, &st.BlockedKeys, &oldest, &now)
	if err != nil {
		return st, wrap("stats", err)
	}
	if t, err := epoch(oldest); err != nil {
		return st, err
	} else if !t.IsZero() {
		st.OldestPending = max(time.UnixMicro(now).Sub(t), 0)
	}
	if s.opts.KeepSent {
		if err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+s.archive).Scan(&st.Sent); err != nil {
			return st, wrap("stats", err)
		}
	}
	return st, nil
}

// MySQL error numbers this store translates.
const (
	errNoSuchTable = 1146 // ER_NO_SUCH_TABLE
	errBadDB       = 1049 // ER_BAD_DB_ERROR
	errNoDB        = 1046 // ER_NO_DB_ERROR
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
		case errNoDB:
			return fmt.Errorf("mysqlstore: %s: the connection has no database selected: name one in the URL (mysql://…/dbname) or set Config.Schema: %w", op, err)
		}
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("mysqlstore: %s: %w", op, store.ErrNotFound)
	}
	return fmt.Errorf("mysqlstore: %s: %w", op, err)
}
