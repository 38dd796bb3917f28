package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"regexp"
	"time"

	outbox "github.com/outbox-go/outbox"
)

// Errors every store returns for the same situations.
var (
	// ErrNotFound: no event with that id.
	ErrNotFound = errors.New("store: no such event")
	// ErrNotMigrated: the outbox table does not exist.
	ErrNotMigrated = errors.New("store: the outbox table does not exist; run `outbox migrate --db URL` first")
	// ErrRefused: the database answered and refused the connection (the
	// login, the password, a missing database or privilege): retrying with
	// the same URL cannot succeed. Open wraps it with %w.
	ErrRefused = errors.New("store: refused by the database")
	// ErrInvalidName: a table or schema name failed validation.
	ErrInvalidName = errors.New("store: invalid table or schema name")
)

// Refused returns err marked with ErrRefused, its message unchanged.
func Refused(err error) error { return refused{err} }

type refused struct{ err error }

func (r refused) Error() string   { return r.err.Error() }
func (r refused) Unwrap() []error { return []error{r.err, ErrRefused} }

// Store is what an application calls: enqueue events (alone, or inside its
// own transaction), the operator's tools (dead letters, purge, stats), and
// the schema's lifecycle. The relay drives the same value through its
// driver (package store/driver).
type Store interface {
	// Enqueue writes msgs in one transaction of the store's own, in one
	// round trip. Use EnqueueTx to join the caller's transaction.
	Enqueue(ctx context.Context, msgs ...outbox.Message) error
	// EnqueueTx writes msgs with the caller's *sql.Tx (or *sql.Conn/*sql.DB),
	// in one statement. Validation happens first; on a validation error
	// nothing is sent to the database and tx stays usable.
	EnqueueTx(ctx context.Context, tx Execer, msgs ...outbox.Message) error

	// Get returns one event by id, from the outbox or the archive.
	Get(ctx context.Context, id int64) (Record, error)
	// ListDead lists DEAD events in id order, each with the first
	// PreviewBytes of its payload (Record.PayloadSize is its length).
	ListDead(ctx context.Context, q DeadQuery) ([]Record, error)
	// RequeueDead turns matching DEAD events back into NEW with attempts 0.
	RequeueDead(ctx context.Context, q DeadQuery) (int64, error)
	// Purge deletes SENT (archived) or DEAD events older than a cutoff, in
	// bounded batches, and returns how many went.
	Purge(ctx context.Context, req PurgeRequest) (int64, error)
	// Stats returns counts and ages for status pages and metrics.
	Stats(ctx context.Context) (Stats, error)

	// Migrate creates the schema unless it is in place. Idempotent, and
	// safe when several processes migrate at once.
	Migrate(ctx context.Context) error
	// Close releases what the store opened itself (not the caller's pool).
	Close() error
}

// Execer is what EnqueueTx needs: *sql.Tx, *sql.Conn and *sql.DB have it, and
// so do the handles of sqlx, bun and ent underneath.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Record is an event with its bookkeeping, for operators.
type Record struct {
	outbox.Event
	// PayloadSize is the payload's length in bytes; Payload holds all of
	// it (Get) or its first PreviewBytes (ListDead).
	PayloadSize   int
	Status        outbox.Status
	LastError     string
	NextAttemptAt time.Time
	LeaseOwner    string
	LeaseUntil    time.Time // zero when not leased
	SentAt        time.Time // zero unless SENT
}

// DeadQuery selects DEAD events. Empty fields match everything.
type DeadQuery struct {
	IDs     []int64
	Topic   string
	Key     string
	AfterID int64 // ListDead paging: ids greater than this (0: from the lowest, negative ids included)
	Limit   int   // ListDead: default 100
}

// After is the id ListDead lists above: AfterID, or the lowest id when it
// is 0 (a plain-SQL producer may give an event a negative id).
func (q DeadQuery) After() int64 {
	if q.AfterID == 0 {
		return math.MinInt64
	}
	return q.AfterID
}

// PurgeRequest says what to delete.
type PurgeRequest struct {
	Status    outbox.Status // StatusSent (archive) or StatusDead
	OlderThan time.Duration // by sent_at for SENT, created_at for DEAD
	BatchSize int           // rows per statement; default 1000
	// Topic and Key narrow a DEAD purge to one topic or key; empty
	// matches every one. A SENT purge refuses them.
	Topic, Key string
	// IDs narrows a DEAD purge to these events (the dashboard's skip);
	// empty matches every one. A SENT purge refuses them.
	IDs []int64
}

// WithDefaults returns r with its defaults filled in.
func (r PurgeRequest) WithDefaults() PurgeRequest {
	if r.BatchSize <= 0 {
		r.BatchSize = DefaultBatchSize
	}
	return r
}

// Validate refuses a Topic, Key or IDs on a SENT purge (the archive is
// purged by age alone).
func (r PurgeRequest) Validate() error {
	if r.Status == outbox.StatusSent && (r.Topic != "" || r.Key != "" || len(r.IDs) > 0) {
		return errors.New("store: purge: sent events are purged by age only; Topic, Key and IDs apply to DEAD events")
	}
	return nil
}

// Stats summarizes an outbox table.
type Stats struct {
	New           int64 // waiting (including delayed and retrying)
	Sending       int64 // claimed under a lease
	Dead          int64
	Sent          int64 // in the archive table (0 when sent events are deleted)
	Retrying      int64 // NEW with attempts > 0
	ExpiredLeases int64 // SENDING whose lease ran out (a relay died or stalled), or that has none (lease_until NULL: a plain-SQL row)
	BlockedKeys   int64 // keys held by a DEAD event
	// HeldForGood counts the NEW events whose next_attempt_at lies a
	// year or more ahead, or holds no time at all (a plain-SQL
	// producer's 'infinity', year 9999, or text in SQLite): each holds
	// its key, most likely for good, until the row is fixed with SQL.
	HeldForGood int64
	// OldestPending is the age of the oldest NEW or SENDING event; 0 if none.
	OldestPending time.Duration
}

// Pending is New+Sending.
func (s Stats) Pending() int64 { return s.New + s.Sending }

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// MaxTableName is the longest outbox table name: the names derived from
// it (Table+"_migrations", the longest) must fit in 63 characters,
// PostgreSQL's and MySQL's limit.
const MaxTableName = 50

// ValidateName checks a table or schema name against ^[a-z_][a-z0-9_]{0,62}$
// (Options.Validate also keeps a table name to MaxTableName).
func ValidateName(kind, name string) error {
	if !identRE.MatchString(name) {
		return fmt.Errorf("%w: %s %q: use lower-case letters, digits and _ (at most 63, not starting with a digit)", ErrInvalidName, kind, name)
	}
	return nil
}

// Defaults shared by the stores.
const (
	DefaultTable     = "outbox"
	DefaultBatchSize = 1000
)
