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
	// ErrLeaseLost: the rows are no longer held by this (owner, epoch): the
	// lease expired and another relay took them, or they were acked already.
	// Nothing was changed.
	ErrLeaseLost = errors.New("store: lease lost: these events are no longer held by this claim (its lease expired and another relay may have taken them, or they were settled already); nothing was changed")
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

// Store is what the relay engine and the CLI need from a database.
type Store interface {
	// Migrate creates or upgrades the schema. Idempotent, and safe when
	// several processes migrate at once.
	Migrate(ctx context.Context) error
	// Enqueue writes msgs in one transaction of the store's own, in one
	// round trip. Use EnqueueTx to join the caller's transaction.
	Enqueue(ctx context.Context, msgs ...outbox.Message) error
	// EnqueueTx writes msgs with the caller's *sql.Tx (or *sql.Conn/*sql.DB),
	// in one statement. Validation happens first; on a validation error
	// nothing is sent to the database and tx stays usable.
	EnqueueTx(ctx context.Context, tx Execer, msgs ...outbox.Message) error

	// Claim takes up to req.Limit ready events in id order under a new lease.
	Claim(ctx context.Context, req ClaimRequest) (Claim, error)
	// Extend renews the lease on ids until now+d (database clock).
	Extend(ctx context.Context, lease Lease, ids []int64, d time.Duration) (time.Time, error)
	// Ack marks ids delivered: deletes them, or moves them to the archive
	// table as SENT when the store keeps sent events. ErrLeaseLost if any id
	// is no longer held by lease (the others are still acked).
	Ack(ctx context.Context, lease Lease, ids []int64) error
	// Retry gives events back for a later attempt: attempts+1, next attempt
	// after Delay, last_error set.
	Retry(ctx context.Context, lease Lease, retries []Retry) error
	// Bury marks events DEAD with their reason (attempts+1).
	Bury(ctx context.Context, lease Lease, burials []Burial) error
	// Release gives unfinished events back untouched (graceful stop).
	Release(ctx context.Context, lease Lease, ids []int64) error

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

	// Close releases what the store opened itself (not the caller's pool).
	Close() error
}

// Execer is what EnqueueTx needs: *sql.Tx, *sql.Conn and *sql.DB have it, and
// so do the handles of sqlx, bun and ent underneath.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Lease identifies one claim: only the holder of (Owner, Epoch) may change
// the claimed rows.
type Lease struct {
	Owner string // unique per relay process
	Epoch int64  // fencing token: unique per claim of that owner, increasing
}

// ClaimRequest says what a relay wants.
type ClaimRequest struct {
	Lease Lease
	// Limit is the most events to take; default 100.
	Limit int
	// LeaseFor is how long the claim holds before others may take it; default 30s.
	LeaseFor time.Duration
	// HoldDeadKeys: a DEAD event holds the later events of its key until an
	// operator requeues or purges it. This keeps order; set false to move on.
	HoldDeadKeys bool
}

// Claim is the result of ClaimRequest.
type Claim struct {
	Lease  Lease
	Until  time.Time // lease expiry, database clock
	Events []outbox.Event
	// Buried are the claimed events the claim itself marked DEAD because
	// their rows break the table contract (see Screen); they are not in
	// Events. The relay logs and counts them like its own burials.
	Buried []Burial
}

// Retry is one event to try again later.
type Retry struct {
	ID    int64
	Delay time.Duration
	Error string
}

// Burial is one event to mark DEAD.
type Burial struct {
	ID    int64
	Error string
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

// Normalize fills PurgeRequest defaults and refuses a Topic or Key on a
// SENT purge (the archive is purged by age alone).
func (r PurgeRequest) Normalize() (PurgeRequest, error) {
	if r.BatchSize <= 0 {
		r.BatchSize = DefaultBatchSize
	}
	if r.Status == outbox.StatusSent && (r.Topic != "" || r.Key != "" || len(r.IDs) > 0) {
		return r, errors.New("store: purge: sent events are purged by age only; Topic, Key and IDs apply to DEAD events")
	}
	return r, nil
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

// ClaimAcker is an optional ability: acknowledging a whole claim at once,
// without listing its events, when every event of it was delivered (the
// relay's common case). A store that records claims per batch can then drop
// the claim and its rows in one statement.
type ClaimAcker interface {
	// AckClaim acks every event of the claim lease, which took n events:
	// deletes them, or archives them as SENT when the store keeps sent
	// events. ErrLeaseLost when the claim is no longer this lease's (taken
	// over: nothing is changed) or fewer than n of its events were left.
	AckClaim(ctx context.Context, lease Lease, n int) error
}

// Notifier is an optional ability: a channel that receives a value soon after
// events are committed (LISTEN/NOTIFY, or an in-process signal). Only a hint:
// the relay still polls.
type Notifier interface {
	Notify(ctx context.Context) <-chan struct{}
}

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// MaxTableName is the longest outbox table name: the names derived from
// it (Table+"_migrations", the longest) must fit in 63 characters,
// PostgreSQL's and MySQL's limit.
const MaxTableName = 50

// ValidateName checks a table or schema name against ^[a-z_][a-z0-9_]{0,62}$
// (Options.Normalize also keeps a table name to MaxTableName).
func ValidateName(kind, name string) error {
	if !identRE.MatchString(name) {
		return fmt.Errorf("%w: %s %q: use lower-case letters, digits and _ (at most 63, not starting with a digit)", ErrInvalidName, kind, name)
	}
	return nil
}

// Defaults shared by the stores.
const (
	DefaultTable     = "outbox"
	DefaultLimit     = 100
	DefaultLeaseFor  = 30 * time.Second
	DefaultBatchSize = 1000
)

// Normalize fills ClaimRequest defaults.
func (r ClaimRequest) Normalize() ClaimRequest {
	if r.Limit <= 0 {
		r.Limit = DefaultLimit
	}
	if r.LeaseFor <= 0 {
		r.LeaseFor = DefaultLeaseFor
	}
	return r
}
