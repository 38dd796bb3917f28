package binlog

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/outbox-go/outbox/store"
)

// Defaults of Config.
const (
	DefaultLeaseFor      = 10 * time.Second
	DefaultHeartbeat     = time.Second
	DefaultDeleteBatch   = 1000
	DefaultFallbackBatch = 500
	DefaultMaxBuffered   = 50_000
	DefaultSaveEvery     = 30 * time.Second
)

// Config configures a Source. The zero value streams the table outbox of
// the connection's database.
type Config struct {
	// Table is the outbox table; default "outbox". The source keeps its
	// lease and resume position in <table>_binlog.
	Table string
	// Schema is the table's database; default the connection's.
	Schema string
	// Owner names this process in the lease; default host-pid-random, at
	// most 64 characters.
	Owner string
	// LeaseFor is how long the streaming lease lasts unless renewed (every
	// third of it); another process takes over after it expired. Default
	// 10s.
	LeaseFor time.Duration
	// ServerID is the replica server id the stream registers with; it
	// must differ from every server's and replica's. Default a random id
	// of 2^30 or more.
	ServerID uint32
	// Heartbeat is how often the server sends a heartbeat on an idle
	// stream; a stream silent for three of them (at least 5s) is
	// reconnected. Default 1s.
	Heartbeat time.Duration
	// DeleteBatch is the most rows one DELETE removes after delivery;
	// default 1000.
	DeleteBatch int
	// FallbackBatch is how many rows read from the table in a fallback
	// make one transaction handed out; default 500.
	FallbackBatch int
	// MaxBuffered bounds the events waiting for Next; the stream pauses
	// above it. Default 50,000.
	MaxBuffered int
	// SaveEvery is how often the resume position is written when only
	// transactions without events were acknowledged (other tables'
	// writes); default 30s. Acknowledged events write it at once.
	SaveEvery time.Duration
	// OnFallback, when set, is called with the reason each time the
	// source falls back to reading the table (telemetry).
	OnFallback func(reason string)
	// Logger receives state changes; default slog.Default().
	Logger *slog.Logger
}

// WithDefaults fills the defaults and validates c.
func (c Config) WithDefaults() (Config, error) {
	if c.Table == "" {
		c.Table = store.DefaultTable
	}
	if err := store.ValidateName("table", c.Table); err != nil {
		return c, fmt.Errorf("binlog: %w", err)
	}
	if len(c.Table) > 57 {
		return c, fmt.Errorf("binlog: table name %q is longer than 57 characters, which leaves no room for its _binlog table", c.Table)
	}
	if c.Schema != "" {
		if err := store.ValidateName("schema", c.Schema); err != nil {
			return c, fmt.Errorf("binlog: %w", err)
		}
	}
	if c.Owner == "" {
		c.Owner = defaultOwner()
	}
	if len(c.Owner) > 64 {
		return c, fmt.Errorf("binlog: Owner %q is longer than 64 characters", c.Owner)
	}
	if c.LeaseFor < 0 || c.Heartbeat < 0 || c.DeleteBatch < 0 || c.FallbackBatch < 0 || c.MaxBuffered < 0 || c.SaveEvery < 0 {
		return c, errors.New("binlog: LeaseFor, Heartbeat, DeleteBatch, FallbackBatch, MaxBuffered and SaveEvery must not be negative (0 means the default)")
	}
	if c.LeaseFor == 0 {
		c.LeaseFor = DefaultLeaseFor
	}
	if c.LeaseFor < 300*time.Millisecond {
		return c, errors.New("binlog: LeaseFor must be at least 300ms")
	}
	if c.ServerID == 0 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.ServerID = binary.LittleEndian.Uint32(b[:])>>2 | 1<<30
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.DeleteBatch == 0 {
		c.DeleteBatch = DefaultDeleteBatch
	}
	if c.FallbackBatch == 0 {
		c.FallbackBatch = DefaultFallbackBatch
	}
	if c.MaxBuffered == 0 {
		c.MaxBuffered = DefaultMaxBuffered
	}
	if c.SaveEvery == 0 {
		c.SaveEvery = DefaultSaveEvery
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
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
