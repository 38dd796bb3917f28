package pgcdc

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox/store"
)

// Defaults of Config.
const (
	DefaultPrefix          = "outbox"
	DefaultLeaseFor        = 10 * time.Second
	DefaultHeartbeat       = 10 * time.Second
	DefaultStatusInterval  = time.Second
	DefaultDeleteBatch     = 1000
	DefaultMaxBuffered     = 50_000
	heartbeatPrefixSuffix  = "hb"
	messageFormatVersion   = 1
	replicationOutputProto = "1"
)

// Config configures a Source. The zero value streams the table outbox
// through the slot outbox_outbox and the publication outbox_outbox_pub.
type Config struct {
	// Table is the outbox table (table mode), or the name the table-less
	// mode derives its own tables from (<table>_cdc, <table>_dead);
	// default "outbox".
	Table string
	// Schema is the table's schema; default the connection's current
	// schema.
	Schema string
	// Slot is the replication slot; default "outbox_" + Table. Validated
	// as a table name is (slot names allow [a-z0-9_] only).
	Slot string
	// Publication is the publication the slot streams; default
	// "outbox_" + Table + "_pub". In table-less mode it publishes no table.
	Publication string
	// TableLess streams pg_logical_emit_message records written by
	// EnqueueMessage instead of the table's rows: nothing to delete, no
	// table growth. Burial events go to <table>_dead, an outbox table of
	// its own (`outbox dead list --table <table>_dead` shows them).
	TableLess bool
	// Prefix is the logical message prefix of the table-less mode (and of
	// the heartbeat, Prefix+"hb"); default "outbox". EnqueueMessage's
	// Emitter must use the same.
	Prefix string
	// Owner names this process in the lease; default host-pid-random, at
	// most 64 characters.
	Owner string
	// LeaseFor is how long the streaming lease lasts unless renewed (it is
	// renewed every third of it); another process takes over after it
	// expired. Default 10s.
	LeaseFor time.Duration
	// Heartbeat is how often an idle source writes a non-transactional
	// logical message so that the slot advances on an idle database;
	// default 10s; negative: off.
	Heartbeat time.Duration
	// StatusInterval is how often the source reports its flush position
	// to the server even when nothing was acknowledged; default 1s.
	StatusInterval time.Duration
	// DeleteBatch is the most rows one DELETE removes after delivery (table
	// mode); default 1000.
	DeleteBatch int
	// MaxBuffered bounds the decoded events waiting for Next; the stream
	// pauses above it. Default 50,000.
	MaxBuffered int
	// Logger receives state changes; default slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns c with the default in every zero field.
func (c Config) WithDefaults() Config {
	if c.Table == "" {
		c.Table = store.DefaultTable
	}
	if c.Slot == "" {
		c.Slot = "outbox_" + c.Table
	}
	if c.Publication == "" {
		c.Publication = "outbox_" + c.Table + "_pub"
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Owner == "" {
		c.Owner = defaultOwner()
	}
	if c.LeaseFor == 0 {
		c.LeaseFor = DefaultLeaseFor
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = DefaultStatusInterval
	}
	if c.DeleteBatch == 0 {
		c.DeleteBatch = DefaultDeleteBatch
	}
	if c.MaxBuffered == 0 {
		c.MaxBuffered = DefaultMaxBuffered
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate refuses what WithDefaults left unusable: names a database
// cannot take, negative values, a lease too short to renew.
func (c Config) Validate() error {
	for _, n := range []struct{ kind, name string }{{"table", c.Table}, {"slot", c.Slot}, {"publication", c.Publication}} {
		if err := store.ValidateName(n.kind, n.name); err != nil {
			return fmt.Errorf("pgcdc: %w", err)
		}
	}
	if len(c.Table) > 55 { // room for _dead, _cdc, …
		return fmt.Errorf("pgcdc: table name %q is longer than 55 characters, which leaves no room for its _dead and _cdc tables", c.Table)
	}
	if c.Schema != "" {
		if err := store.ValidateName("schema", c.Schema); err != nil {
			return fmt.Errorf("pgcdc: %w", err)
		}
	}
	if len(c.Owner) > 64 {
		return fmt.Errorf("pgcdc: Owner %q is longer than 64 characters", c.Owner)
	}
	if c.LeaseFor < 0 || c.StatusInterval < 0 || c.DeleteBatch < 0 || c.MaxBuffered < 0 {
		return errors.New("pgcdc: LeaseFor, StatusInterval, DeleteBatch and MaxBuffered must not be negative (0 means the default)")
	}
	if c.LeaseFor < 300*time.Millisecond {
		return errors.New("pgcdc: LeaseFor must be at least 300ms")
	}
	return nil
}

// names are the quoted identifiers a Config leads to.
type names struct {
	table, state, buried string // quoted, qualified when Schema is set
	schema               string // the schema as configured ("" = current)
}

func (c Config) names() names {
	q := func(name string) string {
		if c.Schema != "" {
			return pgx.Identifier{c.Schema, name}.Sanitize()
		}
		return pgx.Identifier{name}.Sanitize()
	}
	return names{table: q(c.Table), state: q(c.Table + "_cdc"), buried: q(c.Table + "_dead"), schema: c.Schema}
}

func defaultOwner() string {
	host, _ := os.Hostname()
	if len(host) > 32 {
		host = host[:32]
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}
