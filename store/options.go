package store

import (
	"fmt"
	"time"

	outbox "github.com/outbox-go/outbox"
)

// Options are the settings every SQL store shares.
type Options struct {
	// Table is the outbox table's name; default "outbox". The archive of
	// sent events is Table+"_archive", the migration bookkeeping
	// Table+"_migrations", and PostgreSQL's claims Table+"_claims".
	// Lower-case letters, digits and _, not starting with a digit, at
	// most MaxTableName characters.
	Table string
	// Schema is the PostgreSQL schema or MySQL database holding the table;
	// default: the connection's current one. Ignored by SQLite.
	Schema string
	// MaxPayload is the largest payload accepted at enqueue, in bytes;
	// default 1 MiB.
	MaxPayload int
	// KeepSent moves acknowledged events to the archive table as SENT
	// (one statement, no in-place update of the hot table) instead of
	// deleting them; purge them with Purge. Default false: delete.
	KeepSent bool
	// Check is optional extra validation run on every message at enqueue
	// after the built-in checks, before anything is written; e.g.
	// (*eventschema.Registry).Check. It sees each message as it will be
	// stored (EventID set, SchemaVersion at least 1, ContentType set) and
	// must be safe for concurrent use. An error rejects the whole call:
	// nothing is written and the caller's transaction stays usable. It comes
	// back as a *outbox.ValidationError carrying the message's index (a
	// *outbox.ValidationError from Check keeps its Field, Err and Fix; any
	// other error becomes its Err), so errors.Is(err,
	// outbox.ErrInvalidMessage) holds.
	Check func(outbox.Message) error
	// ProbeInterval is how often a store whose Notify channel is open
	// looks for commits that carried no notification (a producer's plain
	// INSERT, from any language; another process's EnqueueTx): PostgreSQL
	// and MySQL read the newest id at the end of the primary key, SQLite
	// its file's data_version. They then wake the relay within about that
	// long. Once a look has found nothing for a second, the store looks
	// driver.ProbeIdleFactor (5) times less often until it finds a commit
	// again. 0 means DefaultProbeInterval (1ms); a negative value turns it
	// off, and the relay finds such commits at its next poll.
	ProbeInterval time.Duration
}

// DefaultProbeInterval is Options.ProbeInterval's default: one cheap query
// every millisecond per listening relay while commits arrive, every 5 ms
// while none do (BENCHMARKS.md, "The commit probe's cost").
const DefaultProbeInterval = time.Millisecond

// WithDefaults returns o with its defaults filled in.
func (o Options) WithDefaults() Options {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.MaxPayload <= 0 {
		o.MaxPayload = outbox.DefaultMaxPayload
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = DefaultProbeInterval
	}
	return o
}

// Validate refuses names a store cannot use (ErrInvalidName); a store calls
// it on WithDefaults' result.
func (o Options) Validate() error {
	if err := ValidateName("table", o.Table); err != nil {
		return err
	}
	if len(o.Table) > MaxTableName {
		return fmt.Errorf("%w: table %q: keep it to %d characters so the derived names (%s_archive, %s_migrations) fit in 63", ErrInvalidName, o.Table, MaxTableName, o.Table, o.Table)
	}
	if o.Schema != "" {
		if err := ValidateName("schema", o.Schema); err != nil {
			return err
		}
	}
	return nil
}
