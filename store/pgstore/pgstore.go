package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// Config configures a Store. The zero value is usable.
type Config struct {
	store.Options
	// DisableNotify turns off pg_notify on enqueue altogether (NotifyInterval
	// is then ignored). Default false: enqueues notify the table's channel,
	// coalesced as NotifyInterval says, so that relays wake at once (a hint;
	// they poll anyway). Turn it off when the relay runs in the same process
	// (the in-process signal wakes it) or when poll latency is enough.
	DisableNotify bool
	// NotifyInterval coalesces the notifications of this Store's enqueues:
	// at most one enqueue per interval carries a pg_notify; the enqueues
	// inside the window skip it. 0 means DefaultNotifyInterval; a negative
	// value makes every enqueue notify, as before coalescing. It matters
	// because PostgreSQL serializes the commits of notifying transactions
	// (a global lock held through the commit's WAL flush), which halves the
	// commit rate of concurrent writers that all notify.
	//
	// A notification is only a wake-up hint. Relays poll anyway, and a relay
	// looks again shortly after each wake-up, so a commit whose notification
	// was coalesced away is found within a few milliseconds when its
	// transaction commits about when the notifying one does. It waits for
	// the relay's next poll when it commits much later than that, or when
	// the transaction that carried the notification rolls back. The window
	// is per Store: each process notifies at most once per interval.
	NotifyInterval time.Duration
	// VacuumAfter is how many rows this Store deletes from the outbox table
	// (acks, purges) before it runs VACUUM on the table in the background,
	// as soon as a claim finds the backlog drained (or, while claims still
	// come back full, after ten times as many), at most one at a time and
	// one a second; 0 means DefaultVacuumAfter, a negative value leaves
	// vacuuming to autovacuum. Claims walk the
	// primary key from its start, so the dead entries of drained rows slow
	// every claim until a VACUUM removes them (see vacuum.go). The role
	// needs to own the table; without that, PostgreSQL skips the VACUUM
	// with a warning and nothing changes.
	VacuumAfter int64
}

// DefaultNotifyInterval is NotifyInterval's default: at most 1,000
// notifications a second per Store. Each notifying commit is serialized
// with the others, so the interval trades write throughput for wake-up
// latency: at 1,000 events/s a relay in another process confirmed events
// with p50 1.3–1.6 ms at 1 ms against 2.1 ms at 5 ms, while the outbox row
// cost 8 writers about 8 points more throughput at 1 ms than at 5 ms
// (BENCHMARKS.md, "The cost of the outbox row"). Writers that care more about commit rate than
// about a few milliseconds of delivery latency should set 5 ms or more.
const DefaultNotifyInterval = time.Millisecond

// Store is the PostgreSQL store. It is safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	ownPool bool
	opts    store.Options
	notify  bool

	// notifyEvery is the coalescing window (0: every enqueue notifies);
	// notifyDue is when, in nanoseconds after notifyBase (monotonic), the
	// next enqueue may notify.
	notifyEvery time.Duration
	notifyBase  time.Time
	notifyDue   atomic.Int64

	table, archive, migrations, channel string // quoted
	claimLock, migrateLock              int64

	// insertOne writes one message without headers or AvailableAt: the
	// common case, precomputed. The *Notify variants also call pg_notify.
	insertOne, insertOneNotify       string
	insertPrefix, insertNotifyPrefix string

	// probeEvery is Options.ProbeInterval with its default (<0: off).
	probeEvery time.Duration

	// busyOwners holds the owners whose last ClaimOwned took or parked at
	// least half its Limit (a backlog): their next claim walks one branch
	// per shard rather than range-scan every pending row of its shards
	// (see claimOwned).
	busyOwners sync.Map // owner → struct{}

	// Vacuuming (vacuum.go): rows deleted since the last VACUUM, the end
	// of the last one (a time.Time), whether one runs, and its error.
	vacuumAfter int64
	sinceVacuum atomic.Int64
	lastVacuum  atomic.Value
	vacuuming   atomic.Bool
	vacuumErr   atomic.Value

	// background runs under backgroundCtx; Close cancels and waits.
	background       sync.WaitGroup
	backgroundCtx    context.Context
	cancelBackground context.CancelFunc

	// sweepAfter is the key after which Balance's next orphan sweep
	// starts ("" from the first).
	sweepMu    sync.Mutex
	sweepAfter string

	mu         sync.Mutex
	wakeups    driver.Wakeups
	rebalance  driver.Wakeups // BalanceNotify's
	listening  bool
	stopListen context.CancelFunc
	listenDone chan struct{}
	closed     bool
	sessions   map[string]*relaySession // each owner's own session (session.go)
}

var _ store.Store = (*Store)(nil)

// New returns a store over pool, which stays the caller's to close.
func New(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("pgstore: pool is nil")
	}
	opts := cfg.Options.WithDefaults()
	err := opts.Validate()
	if err != nil {
		return nil, err
	}
	q := func(name string) string {
		if opts.Schema != "" {
			return pgx.Identifier{opts.Schema, name}.Sanitize()
		}
		return pgx.Identifier{name}.Sanitize()
	}
	s := &Store{
		pool:        pool,
		opts:        opts,
		notify:      !cfg.DisableNotify,
		notifyEvery: cfg.NotifyInterval,
		notifyBase:  time.Now(),
		table:       q(opts.Table),
		archive:     q(opts.Table + "_archive"),
		migrations:  q(opts.Table + "_migrations"),
		channel:     opts.Schema + "." + opts.Table + "_events",
		claimLock:   driver.LockKey(opts, "claim"),
		migrateLock: driver.LockKey(opts, "migrate"),
	}
	s.probeEvery = opts.ProbeInterval
	s.vacuumAfter = cfg.VacuumAfter
	if s.vacuumAfter == 0 {
		s.vacuumAfter = DefaultVacuumAfter
	}
	s.lastVacuum.Store(time.Time{})
	s.backgroundCtx, s.cancelBackground = context.WithCancel(context.Background())
	switch {
	case s.notifyEvery == 0:
		s.notifyEvery = DefaultNotifyInterval
	case s.notifyEvery < 0:
		s.notifyEvery = 0
	}
	cols := "INSERT INTO " + s.table + " (event_id, topic, event_key, event_type, aggregate_type, schema_version, payload, content_type, headers, next_attempt_at) VALUES "
	s.insertPrefix = cols
	s.insertNotifyPrefix = "WITH ins AS (" + cols
	s.insertOne = cols + "($1, $2::varchar, $3, $4::varchar, $5, $6::integer, $7, $8, '{}', now())"
	s.insertOneNotify = "WITH ins AS (" + s.insertOne + " RETURNING 1) SELECT pg_notify($9, '')"
	return s, nil
}

// ErrBadURL is wrapped by Open's errors about the URL itself (it cannot be
// parsed, or a parameter has a bad value), as opposed to a database that
// cannot be reached: retrying cannot fix it.
var ErrBadURL = errors.New("pgstore: bad database URL")

// Open connects to url (postgres://…) with a pool of its own, closed by Close.
func Open(ctx context.Context, url string, cfg Config) (*Store, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgxpool's default, max(4, CPUs), is short for a relay: each
		// worker may hold two connections (the claim of one batch, the
		// settle of the previous one), besides the listener, the probe,
		// the heartbeat and a VACUUM (the session has a connection of
		// its own).
		pc.MaxConns = max(pc.MaxConns, 10)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "3D000" {
			return nil, store.Refused(fmt.Errorf("pgstore: database %q does not exist on %s: create it (createdb %s) or fix the URL", pc.ConnConfig.Database, pc.ConnConfig.Host, pc.ConnConfig.Database))
		}
		if errors.As(err, &pgErr) && refusal(pgErr.Code) {
			// the server answered: a role, password, privilege or
			// pg_hba.conf refusal, which no retry fixes
			return nil, store.Refused(connectError{fmt.Sprintf("pgstore: refused by %s:%d: %s: check the user and password in the URL, the role's CONNECT privilege and pg_hba.conf", pc.ConnConfig.Host, pc.ConnConfig.Port, connectReason(err)), err})
		}
		return nil, connectError{fmt.Sprintf("pgstore: cannot reach %s:%d: %s", pc.ConnConfig.Host, pc.ConnConfig.Port, connectReason(err)), err}
	}
	s, err := New(pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownPool = true
	return s, nil
}

// refusal reports whether a SQLSTATE met at connect is the server refusing
// for good: class 28 (invalid authorization: an unknown role, a wrong
// password, no pg_hba.conf entry) or 42501 (no CONNECT privilege). A server
// starting up, shutting down or out of connections (57P03, 57P01, 53300)
// is worth waiting for.
func refusal(code string) bool {
	return strings.HasPrefix(code, "28") || code == "42501"
}

// connectError is a failed first connection told in one line; it unwraps
// to pgx's error.
type connectError struct {
	msg string
	err error
}

func (e connectError) Error() string { return e.msg }
func (e connectError) Unwrap() error { return e.err }

// connectReason is pgx's connect error in one line: pgx puts each attempt
// (every address of the host, and with sslmode=prefer, the default, TLS
// then plain) on a line of its own, so one refused port read as the same
// dial error twice, with newlines and tabs, in a log's error=. Repeats are
// dropped and the rest joined with "; ".
func connectReason(err error) string {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return strings.Join(strings.Fields(err.Error()), " ")
	}
	prefix := fmt.Sprintf("user=%s database=%s: ", ce.Config.User, ce.Config.Database)
	var parts []string
	seen := map[string]bool{}
	var add func(error)
	add = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				add(e)
			}
			return
		}
		msg := strings.Join(strings.Fields(e.Error()), " ")
		if !seen[msg] {
			seen[msg] = true
			parts = append(parts, msg)
		}
	}
	add(errors.Unwrap(ce))
	return prefix + strings.Join(parts, "; ")
}

// Pool returns the pool the store uses.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Table returns the quoted, qualified table name.
func (s *Store) Table() string { return s.table }

// Close stops the listener and closes the pool if Open created it.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	stop, done := s.stopListen, s.listenDone
	s.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	s.cancelBackground()
	s.background.Wait()
	s.closeSessions()
	if s.ownPool {
		s.pool.Close()
	}
	return nil
}

// Migrate creates the schema (schema.go) unless it is in place, in one
// transaction under an advisory lock, so several processes may migrate at
// once.
func (s *Store) Migrate(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit this is a no-op
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", s.migrateLock); err != nil {
		return fmt.Errorf("pgstore: migrate: lock: %w", err)
	}
	if s.opts.Schema != "" {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{s.opts.Schema}.Sanitize()); err != nil {
			return fmt.Errorf("pgstore: migrate: create schema: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+s.migrations+" (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	var current int
	if err := tx.QueryRow(ctx, "SELECT COALESCE(max(version), 0) FROM "+s.migrations).Scan(&current); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	if current >= migrationVersion {
		return nil
	}
	if _, err := tx.Exec(ctx, schema(s.table, s.archive, s.claimsTable(), s.opts.Table, s.qualified)); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+s.migrations+" (version) VALUES ($1)", migrationVersion); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	return nil
}

// maxRowsPerInsert keeps one INSERT under PostgreSQL's 65535 parameters.
const maxRowsPerInsert = 6000

// takeNotify reports whether the enqueue about to be written should carry a
// pg_notify, and if so starts a new coalescing window. Concurrent callers
// race with one compare-and-swap: one wins, the others skip.
func (s *Store) takeNotify() bool {
	if !s.notify {
		return false
	}
	if s.notifyEvery <= 0 {
		return true
	}
	now := int64(time.Since(s.notifyBase))
	due := s.notifyDue.Load()
	return now >= due && s.notifyDue.CompareAndSwap(due, now+int64(s.notifyEvery))
}

// lean reports whether m needs neither the headers nor the next_attempt_at
// parameter: the column gets '{}' and now(), as it would from them.
func lean(m *outbox.Message) bool { return len(m.Headers) == 0 && m.AvailableAt.IsZero() }

// insert hands run the statements, with their arguments, that write msgs
// (already validated and normalized), in order. At most one of them calls
// pg_notify, and only if takeNotify says so.
func (s *Store) insert(msgs []outbox.Message, run func(sql string, args []any) error) error {
	notify := s.takeNotify()
	if len(msgs) == 1 && lean(&msgs[0]) {
		m := &msgs[0]
		if notify {
			return run(s.insertOneNotify, []any{m.EventID, m.Topic, m.Key, m.Type, m.AggregateType, m.SchemaVersion, m.Payload, m.ContentType, s.channel})
		}
		return run(s.insertOne, []any{m.EventID, m.Topic, m.Key, m.Type, m.AggregateType, m.SchemaVersion, m.Payload, m.ContentType})
	}
	for start := 0; start < len(msgs); start += maxRowsPerInsert {
		end := min(start+maxRowsPerInsert, len(msgs))
		sql, args := s.buildInsert(msgs[start:end], notify && start == 0)
		if err := run(sql, args); err != nil {
			return err
		}
	}
	return nil
}

// paramCasts follow the first 8 parameters of an inserted row. The columns
// with a domain (topic, event_type, schema_version, headers) take a
// parameter of the domain's base type: a parameter of the domain type
// itself would be checked twice, by the domain's input function at every
// bind and again in the plan, which cost the one-row enqueue several
// microseconds of backend CPU (BenchmarkContractCheckCPU).
var paramCasts = [8]string{",", "::varchar,", ",", "::varchar,", ",", "::integer,", ",", ","}

// buildInsert returns one multi-row INSERT of msgs (at most
// maxRowsPerInsert) and its arguments. The other columns' types come from
// the table, so their parameters need no casts; a lean row takes 8
// parameters, others 10.
func (s *Store) buildInsert(msgs []outbox.Message, notify bool) (string, []any) {
	b := make([]byte, 0, len(s.insertNotifyPrefix)+len(msgs)*64+32)
	if notify {
		b = append(b, s.insertNotifyPrefix...)
	} else {
		b = append(b, s.insertPrefix...)
	}
	a := make([]any, 0, len(msgs)*10+1)
	for i := range msgs {
		m := &msgs[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '(')
		n := len(a)
		a = append(a, m.EventID, m.Topic, m.Key, m.Type, m.AggregateType, m.SchemaVersion, m.Payload, m.ContentType)
		for p := n + 1; p <= n+8; p++ {
			b = appendParam(b, p)
			b = append(b, paramCasts[p-n-1]...)
		}
		if lean(m) {
			b = append(b, "'{}',now())"...)
			continue
		}
		var avail any
		if !m.AvailableAt.IsZero() {
			avail = m.AvailableAt
		}
		a = append(a, driver.EncodeHeaders(m.Headers), avail)
		b = appendParam(b, n+9)
		b = append(b, "::jsonb,COALESCE("...)
		b = appendParam(b, n+10)
		b = append(b, ",now()))"...)
	}
	if notify {
		a = append(a, s.channel)
		b = append(b, " RETURNING 1) SELECT pg_notify("...)
		b = appendParam(b, len(a))
		b = append(b, ", '')"...)
	}
	return string(b), a
}

// appendParam appends the placeholder $n.
func appendParam(b []byte, n int) []byte {
	return strconv.AppendInt(append(b, '$'), int64(n), 10)
}

// Enqueue writes msgs in a transaction of its own.
func (s *Store) Enqueue(ctx context.Context, msgs ...outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	norm, err := driver.Prepare(s.opts, msgs)
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return s.exec(ctx, tx, norm) })
	if err != nil {
		return wrap("enqueue", err)
	}
	s.signal()
	return nil
}

// EnqueuePgxTx writes msgs with the caller's pgx transaction (from a
// *pgx.Conn or a *pgxpool.Pool): they commit or roll back with it.
func (s *Store) EnqueuePgxTx(ctx context.Context, tx pgx.Tx, msgs ...outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	norm, err := driver.Prepare(s.opts, msgs)
	if err != nil {
		return err
	}
	return wrap("enqueue", s.exec(ctx, tx, norm))
}

// EnqueueInBatch queues the INSERT of msgs on b, the caller's pgx batch,
// so that the outbox rows travel with the business statements in one round
// trip: send b with tx.SendBatch inside the business transaction, or with
// SendBatch on a pool or conn, where PostgreSQL runs a batch as one implicit
// transaction (all its statements commit together, or none). Validation
// errors come back now and queue nothing; database errors come back from
// the batch's results like those of the caller's own statements. It queues
// one statement per 6,000 messages (b.Len() counts them).
//
// A separate INSERT costs a round trip, which at 8 concurrent writers was
// about 15 points of a one-row business transaction's throughput here
// (BENCHMARKS.md, "The cost of the outbox row"): this is the way to
// enqueue when that matters.
func (s *Store) EnqueueInBatch(b *pgx.Batch, msgs ...outbox.Message) error {
	if b == nil {
		return errors.New("pgstore: EnqueueInBatch: the batch is nil; pass the *pgx.Batch the business statements are queued on")
	}
	if len(msgs) == 0 {
		return nil
	}
	norm, err := driver.Prepare(s.opts, msgs)
	if err != nil {
		return err
	}
	return s.insert(norm, func(sql string, args []any) error {
		b.Queue(sql, args...)
		return nil
	})
}

func (s *Store) exec(ctx context.Context, tx pgx.Tx, msgs []outbox.Message) error {
	return s.insert(msgs, func(sql string, args []any) error {
		_, err := tx.Exec(ctx, sql, args...)
		return err
	})
}

// EnqueueTx writes msgs with the caller's database/sql transaction (pgx's
// stdlib driver or any PostgreSQL driver with $n placeholders).
func (s *Store) EnqueueTx(ctx context.Context, tx store.Execer, msgs ...outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	norm, err := driver.Prepare(s.opts, msgs)
	if err != nil {
		return err
	}
	return wrap("enqueue", s.insert(norm, func(sql string, args []any) error {
		_, err := tx.ExecContext(ctx, sql, args...)
		return err
	}))
}

const eventCols = "id, event_id::text, topic, event_key, event_type, aggregate_type, schema_version, payload, content_type, headers::text, attempts, created_at"
const recordCols = eventCols + ", status, last_error, next_attempt_at, lease_owner, lease_until, sent_at, octet_length(payload)"

// previewCols are recordCols with the payload's first store.PreviewBytes
// only (substring reads only the TOAST chunks it needs; octet_length none).
var previewCols = strings.Replace(recordCols, "payload,", "substring(payload from 1 for "+strconv.Itoa(store.PreviewBytes)+"),", 1)

// qualified quotes name, in the table's schema when one is set.
func (s *Store) qualified(name string) string {
	if s.opts.Schema != "" {
		return pgx.Identifier{s.opts.Schema, name}.Sanitize()
	}
	return pgx.Identifier{name}.Sanitize()
}

func prefixed(cols, p string) string {
	parts := strings.Split(cols, ", ")
	for i := range parts {
		parts[i] = p + parts[i]
	}
	return strings.Join(parts, ", ")
}

func scanRecord(row pgx.Row) (store.Record, error) {
	var r store.Record
	var headers []byte
	var status string
	// pgtype.Timestamptz takes 'infinity' too, which the domains refuse
	// but a table of another shape may hold: shown as the zero time.
	var created, next, until, sent pgtype.Timestamptz
	err := row.Scan(&r.ID, &r.EventID, &r.Topic, &r.Key, &r.Type, &r.AggregateType, &r.SchemaVersion, &r.Payload, &r.ContentType, &headers, &r.Attempts, &created,
		&status, &r.LastError, &next, &r.LeaseOwner, &until, &sent, &r.PayloadSize)
	if err != nil {
		return r, err
	}
	r.Status = outbox.Status(status)
	r.CreatedAt, r.NextAttemptAt, r.LeaseUntil, r.SentAt = finite(created), finite(next), finite(until), finite(sent)
	// A row whose headers break the contract is still shown (its
	// last_error says why once a claim buried it), without headers.
	r.Headers, _ = driver.DecodeHeaders(headers)
	return r, nil
}

// finite is t's time, or the zero time when it is NULL or infinite.
func finite(t pgtype.Timestamptz) time.Time {
	if !t.Valid || t.InfinityModifier != pgtype.Finite {
		return time.Time{}
	}
	return t.Time
}

// Get returns one event from the outbox or the archive.
func (s *Store) Get(ctx context.Context, id int64) (store.Record, error) {
	// A claimed row's status column says NEW; its claim says SENDING.
	r, err := scanRecord(s.pool.QueryRow(ctx, "SELECT "+prefixed(eventCols, "o.")+", CASE WHEN c.owner IS NOT NULL AND o.status = 'NEW' THEN 'SENDING' ELSE o.status END, o.last_error, o.next_attempt_at, COALESCE(c.owner, o.lease_owner), COALESCE(c.lease_until, o.lease_until), o.sent_at, octet_length(o.payload) FROM "+s.table+
		" o LEFT JOIN LATERAL (SELECT k.owner, k.lease_until FROM "+s.claimsTable()+" k WHERE o.id <@ k.ids ORDER BY k.lease_until DESC LIMIT 1) c ON true WHERE o.id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		r, err = scanRecord(s.pool.QueryRow(ctx, "SELECT "+recordCols+" FROM "+s.archive+" WHERE id = $1", id))
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("pgstore: event %d: %w", id, store.ErrNotFound)
	}
	return r, wrap("get", err)
}

var _ store.PayloadReader = (*Store)(nil)

// ReadPayload returns n bytes of event id's payload from offset on.
func (s *Store) ReadPayload(ctx context.Context, id int64, offset, n int) ([]byte, error) {
	var b []byte
	err := s.pool.QueryRow(ctx, "(SELECT substring(payload from $2 for $3) FROM "+s.table+" WHERE id = $1) UNION ALL (SELECT substring(payload from $2 for $3) FROM "+s.archive+" WHERE id = $1) LIMIT 1", id, offset+1, n).Scan(&b)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgstore: event %d: %w", id, store.ErrNotFound)
	}
	return b, wrap("read payload", err)
}

const deadFilter = " WHERE status = 'DEAD' AND ($1 = '' OR topic = $1) AND ($2 = '' OR event_key = $2) AND (cardinality($3::bigint[]) = 0 OR id = ANY($3))"

// ListDead lists DEAD events in id order.
func (s *Store) ListDead(ctx context.Context, q store.DeadQuery) ([]store.Record, error) {
	if q.Limit <= 0 {
		q.Limit = driver.DefaultLimit
	}
	rows, err := s.pool.Query(ctx, "SELECT "+previewCols+" FROM "+s.table+deadFilter+" AND id > $4 ORDER BY id LIMIT $5",
		q.Topic, q.Key, nonNil(q.IDs), q.After(), q.Limit)
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
	// The requeued keys' parked rows are unparked: the next claim
	// decides again whether anything still holds them.
	var n int64
	err := s.queryRow(ctx, "WITH req AS (UPDATE "+s.table+" SET status = 'NEW', attempts = 0, next_attempt_at = now(), lease_owner = '', lease_until = NULL, parked = false"+deadFilter+
		" RETURNING id, event_key), "+s.unparkCTE("unparked", "SELECT event_key FROM req", "p.id IN (SELECT id FROM req)")+" SELECT count(*) FROM req",
		[]any{q.Topic, q.Key, nonNil(q.IDs)}, &n)
	if err != nil {
		return 0, wrap("requeue dead", err)
	}
	if n > 0 {
		s.wake(ctx)
	}
	return n, nil
}

// Purge deletes SENT (archived) or DEAD events older than req.OlderThan in
// batches of req.BatchSize.
func (s *Store) Purge(ctx context.Context, req store.PurgeRequest) (int64, error) {
	req = req.WithDefaults()
	err := req.Validate()
	if err != nil {
		return 0, err
	}
	var sql string
	switch req.Status {
	case outbox.StatusSent:
		sql = "DELETE FROM " + s.archive + " WHERE id IN (SELECT id FROM " + s.archive + " WHERE sent_at < now() - $1 * interval '1 microsecond' LIMIT $2)"
	case outbox.StatusDead:
		// The purged keys' parked rows are unparked (see RequeueDead).
		sql = "WITH gone AS (DELETE FROM " + s.table + " WHERE id IN (SELECT id FROM " + s.table + " WHERE status = 'DEAD' AND created_at < now() - $1 * interval '1 microsecond' AND ($3 = '' OR topic = $3) AND ($4 = '' OR event_key = $4) AND (cardinality($5::bigint[]) = 0 OR id = ANY($5)) LIMIT $2) RETURNING event_key), " +
			s.unparkCTE("unparked", "SELECT event_key FROM gone", "") + " SELECT count(*) FROM gone"
	default:
		return 0, fmt.Errorf("pgstore: purge: status must be SENT or DEAD, not %q", req.Status)
	}
	args := []any{req.OlderThan.Microseconds(), req.BatchSize}
	if req.Status == outbox.StatusDead {
		args = append(args, req.Topic, req.Key, nonNil(req.IDs))
	}
	var total int64
	for {
		var n int64
		if req.Status == outbox.StatusDead {
			if err := s.queryRow(ctx, sql, args, &n); err != nil {
				return total, wrap("purge", err)
			}
			s.deleted(n)
			if n > 0 {
				s.wake(ctx)
			}
		} else {
			tag, err := s.pool.Exec(ctx, sql, args...)
			if err != nil {
				return total, wrap("purge", err)
			}
			n = tag.RowsAffected()
		}
		total += n
		if n < int64(req.BatchSize) {
			return total, nil
		}
	}
}

// Stats counts events by state.
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	var st store.Stats
	var oldest float64
	// A claimed row's status column says NEW; its claim says SENDING.
	err := s.queryRowWith(ctx, noJIT, `SELECT
	count(*) FILTER (WHERE o.status = 'NEW' AND f.id IS NULL),
	count(*) FILTER (WHERE o.status = 'NEW' AND f.id IS NOT NULL),
	count(*) FILTER (WHERE o.status = 'DEAD'),
	count(*) FILTER (WHERE o.status = 'NEW' AND f.id IS NULL AND o.attempts > 0),
	count(*) FILTER (WHERE o.status = 'NEW' AND f.until <= now()),
	count(DISTINCT o.event_key) FILTER (WHERE o.status = 'DEAD' AND o.event_key <> ''),
	count(*) FILTER (WHERE o.status = 'NEW' AND f.id IS NULL AND o.next_attempt_at >= now() + interval '1 year'),
	COALESCE(EXTRACT(EPOCH FROM now() - min(o.created_at) FILTER (WHERE o.status <> 'DEAD' AND isfinite(o.created_at))), 0)::float8
FROM `+s.table+` o LEFT JOIN (SELECT x AS id, max(lease_until) AS until FROM `+s.claimsTable()+`, unnest(ids) r, generate_series(lower(r), upper(r) - 1) x GROUP BY 1) f ON f.id = o.id`, nil, &st.New, &st.Sending, &st.Dead, &st.Retrying, &st.ExpiredLeases, &st.BlockedKeys, &st.HeldForGood, &oldest)
	if err != nil {
		return st, wrap("stats", err)
	}
	st.OldestPending = store.AgeOf(oldest)
	if s.opts.KeepSent {
		if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+s.archive).Scan(&st.Sent); err != nil {
			return st, wrap("stats", err)
		}
	}
	return st, nil
}

func nonNil(ids []int64) []int64 {
	if ids == nil {
		return []int64{}
	}
	return ids
}

// wrap adds context and turns "table does not exist" into ErrNotMigrated.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Errorf("pgstore: %s: %w", op, store.ErrNotMigrated)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("pgstore: %s: %w", op, store.ErrNotFound)
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

// noSeqScan is the transaction-local setting of statements that probe the
// small partial indexes (parked, waiting): with a new table's missing
// statistics PostgreSQL chose a sequential scan of the whole table for
// "is any row parked", which finds none only at the end. JIT goes off with
// it: a disabled scan costs 10^10, and every such statement was compiled.
const noSeqScan = "SELECT set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)"

// noJIT is the transaction-local setting of Stats: PostgreSQL estimates
// the claims' ids it unnests (generate_series over each range) at
// millions of rows, far over jit_above_cost, and compiled the statement
// with LLVM at every call: 90 ms for a table of 500 rows on a quiet
// machine, 200–300 ms on a busy one, for each `outbox status` and each
// sample of the dashboard (TestStatsIsNotCompiled).
const noJIT = "SELECT set_config('jit', 'off', true)"

// queryRow runs sql with noSeqScan in one round trip (a batch is one
// implicit transaction) and scans its one row into dest.
func (s *Store) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	return s.queryRowWith(ctx, noSeqScan, sql, args, dest...)
}

// queryRowWith runs settings, then sql, in one round trip and scans sql's
// one row into dest.
func (s *Store) queryRowWith(ctx context.Context, settings, sql string, args []any, dest ...any) error {
	b := &pgx.Batch{}
	b.Queue(settings)
	b.Queue(sql, args...)
	br := s.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(dest...)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}
