package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-go/outbox/source"
)

// Source streams an outbox table's inserts from the MySQL/MariaDB binlog
// and falls back to reading the table when the log cannot be trusted. It
// implements source.Source. Start it, then hand it to relay.NewSource.
type Source struct {
	cfg  Config
	n    names
	db   *sql.DB
	dial dialConfig
	log  *slog.Logger

	epoch    int64 // the lease epoch, set by Start; fences every write
	checksum bool  // the server writes CRC32 checksums (binlog_checksum)

	columns []string // the table's columns in order; the stream's goroutine only

	mu        sync.Mutex
	wake      chan struct{} // Next waits on it (cap 1)
	room      chan struct{} // the stream waits on it when the buffer is full (cap 1)
	buf       []source.Txn
	bufEvents int
	next      source.Position // the last Position handed out
	emitted   []emitted       // handed out, not yet acknowledged
	deadIDs   map[int64]bool  // rows buried, not to be deleted
	saved     resume          // the position last written
	savedAt   time.Time
	streamed  resume    // where the stream is: after the last whole transaction read
	emptyAt   time.Time // when a transaction without events was last handed out
	failed    error
	started   bool
	closed    bool

	fallbacks atomic.Uint64
	heardAt   atomic.Int64 // unix nanoseconds of the last event or heartbeat
	connID    atomic.Uint32

	cancel context.CancelFunc
	done   sync.WaitGroup
}

// emitted is a transaction handed out: its Position, the rows to delete
// once it is acknowledged, and the resume position after it (nil inside a
// fallback's read, which is resumable only after its last row).
type emitted struct {
	pos    source.Position
	ids    []int64
	resume *resume
	force  bool // write the resume position at once (a fallback's)
}

// names are the quoted identifiers a Config leads to.
type names struct {
	table, state string
	schema       string // unquoted, resolved by Start
}

var _ source.Source = (*Source)(nil)

// New returns a Source that reads through db (the caller's to close) and
// streams over a replication connection of its own made with conn's
// address, user and password (the DSN db was opened with:
// mysql.ParseDSN). The user needs REPLICATION SLAVE and REPLICATION
// CLIENT (MariaDB: BINLOG MONITOR), and to create <table>_binlog.
func New(db *sql.DB, conn *mysql.Config, cfg Config) (*Source, error) {
	if db == nil || conn == nil {
		return nil, errors.New("binlog: db and conn are required")
	}
	if conn.TLS != nil || conn.TLSConfig != "" && conn.TLSConfig != "false" {
		return nil, errors.New("binlog: the replication connection does not support TLS; connect over a trusted network or a Unix socket (tls=false)")
	}
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	timeout := conn.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	s := &Source{cfg: cfg, db: db, log: cfg.Logger,
		dial: dialConfig{Net: conn.Net, Addr: conn.Addr, User: conn.User, Passwd: conn.Passwd, Timeout: timeout},
		wake: make(chan struct{}, 1), room: make(chan struct{}, 1), deadIDs: map[int64]bool{}}
	s.n.schema = cfg.Schema
	return s, nil
}

// Config returns the configuration with its defaults filled.
func (s *Source) Config() Config { return s.cfg }

// Epoch is the fencing epoch of the lease Start took.
func (s *Source) Epoch() int64 { return s.epoch }

// Fallbacks is how many times the source read the table because the log
// could not be trusted (or there was no saved position to resume from).
func (s *Source) Fallbacks() uint64 { return s.fallbacks.Load() }

// ReplicationConnID is the server's id of the current replication
// connection (0 before the first), as SHOW PROCESSLIST and KILL know it.
func (s *Source) ReplicationConnID() uint32 { return s.connID.Load() }

// Status is where a Source is.
type Status struct {
	Streamed string    // the binlog position after the last transaction read (file:offset)
	Saved    string    // the resume position written to <table>_binlog
	GTID     string    // the GTID position saved ("" on MySQL)
	HeardAt  time.Time // the last event or heartbeat from the server
}

// Status reports the source's positions and when the server was last
// heard from (a stream silent past a few heartbeats has stalled).
func (s *Source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{GTID: s.saved.GTID}
	if s.streamed.File != "" {
		st.Streamed = fmt.Sprintf("%s:%d", s.streamed.File, s.streamed.Pos)
	}
	if s.saved.File != "" {
		st.Saved = fmt.Sprintf("%s:%d", s.saved.File, s.saved.Pos)
	}
	if at := s.heardAt.Load(); at != 0 {
		st.HeardAt = time.Unix(0, at)
	}
	return st
}

// Start checks the server's settings (refusing to start, naming the fix,
// when the binlog cannot serve the source), creates <table>_binlog, waits
// until it holds the streaming lease, and starts streaming in the
// background: from the saved position, or, when there is none, after
// reading the table's undelivered rows.
func (s *Source) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("binlog: Start called twice")
	}
	s.started = true
	s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return err
	}
	q := func(name string) string { return "`" + s.n.schema + "`.`" + name + "`" }
	s.n.table, s.n.state = q(s.cfg.Table), q(s.cfg.Table+"_binlog")
	if err := s.createState(ctx); err != nil {
		return err
	}
	saved, err := s.acquireLease(ctx)
	if err != nil {
		return err
	}
	var first *snapshot
	if saved != nil {
		s.saved, s.streamed = *saved, *saved
	} else {
		// taken now, so that what commits after Start returns comes from
		// the stream, in commit order; read in the background
		if first, err = s.snapshot(ctx, "no saved position to resume from (first start)"); err != nil {
			s.releaseLease()
			return err
		}
	}
	bg, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.done.Add(2)
	go func() { defer s.done.Done(); s.renewLease(bg) }()
	go func() { defer s.done.Done(); s.stream(bg, saved, first) }()
	return nil
}

// Close stops streaming, waits for the background work and gives the
// lease up. Positions not acknowledged are streamed again by the next
// Start.
func (s *Source) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	if s.cancel != nil {
		s.cancel()
	}
	s.done.Wait()
	s.releaseLease()
	return nil
}

func (s *Source) fail(err error) {
	s.mu.Lock()
	if s.failed == nil {
		s.failed = err
	}
	s.mu.Unlock()
	signal(s.wake)
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Next returns the committed transactions read so far, waiting for at
// least one.
func (s *Source) Next(ctx context.Context) ([]source.Txn, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s.mu.Lock()
		if len(s.buf) > 0 {
			out := s.buf
			s.buf = nil
			s.bufEvents = 0
			s.mu.Unlock()
			signal(s.room)
			return out, nil
		}
		err := s.failed
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.wake:
		}
	}
}

// push hands out one transaction, waiting while the buffer is full.
// Transactions without events are handed out at most once a second (the
// others dropped: each later one carries its own resume position), and
// one after another empty one still waiting only moves its resume
// position.
func (s *Source) push(ctx context.Context, t source.Txn, ids []int64, r *resume, force bool) error {
	for {
		s.mu.Lock()
		if s.bufEvents < s.cfg.MaxBuffered || len(t.Events) == 0 {
			break
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.room:
		}
	}
	defer s.mu.Unlock()
	if len(t.Events) == 0 && !force {
		// other tables' transactions: reported at most once a second,
		// enough to move the resume position on an idle outbox, and not
		// a wake-up of the loop for every commit on a busy server
		if time.Since(s.emptyAt) < time.Second {
			return nil
		}
		s.emptyAt = time.Now()
	}
	if len(t.Events) == 0 && len(s.buf) > 0 && len(s.buf[len(s.buf)-1].Events) == 0 && !force {
		last := &s.emitted[len(s.emitted)-1]
		if !last.force {
			last.resume = r
			return nil
		}
	}
	s.next++
	t.Pos = s.next
	s.buf = append(s.buf, t)
	s.bufEvents += len(t.Events)
	s.emitted = append(s.emitted, emitted{pos: t.Pos, ids: ids, resume: r, force: force})
	signal(s.wake)
	return nil
}

// Ack deletes the delivered rows of the transactions up to pos (in
// batches of DeleteBatch, fenced by the lease) and writes the resume
// position after the last of them, with the last batch: at once when it
// had events, at most every SaveEvery when it had none.
func (s *Source) Ack(ctx context.Context, pos source.Position) error {
	s.mu.Lock()
	n := 0
	var ids []int64
	var r *resume
	force := false
	for n < len(s.emitted) && s.emitted[n].pos <= pos {
		e := s.emitted[n]
		for _, id := range e.ids {
			if !s.deadIDs[id] {
				ids = append(ids, id)
			}
		}
		if e.resume != nil {
			r = e.resume
		}
		force = force || e.force || len(e.ids) > 0
		n++
	}
	write := r != nil && *r != s.saved && (force || time.Since(s.savedAt) >= s.cfg.SaveEvery)
	s.mu.Unlock()
	if n == 0 {
		return nil
	}
	for first := true; first || len(ids) > 0; first = false {
		chunk := ids[:min(len(ids), s.cfg.DeleteBatch)]
		ids = ids[len(chunk):]
		last := len(ids) == 0
		if len(chunk) == 0 && !(last && write) {
			break
		}
		err := s.fenced(ctx, func(tx *sql.Tx) error {
			if len(chunk) > 0 {
				args := make([]any, len(chunk))
				for i, id := range chunk {
					args[i] = id
				}
				if _, err := tx.ExecContext(ctx, "DELETE FROM "+s.n.table+" WHERE status = 'NEW' AND id IN (?"+strings.Repeat(",?", len(chunk)-1)+")", args...); err != nil {
					return fmt.Errorf("deleting %d delivered rows: %w", len(chunk), err)
				}
			}
			if last && write {
				if err := s.savePosition(ctx, tx, *r); err != nil {
					return fmt.Errorf("saving the resume position: %w", err)
				}
			}
			return nil
		})
		if err != nil {
			if errors.Is(err, source.ErrFenced) {
				return err
			}
			return fmt.Errorf("binlog: acknowledging: %w", err)
		}
	}
	s.mu.Lock()
	for _, e := range s.emitted[:n] {
		for _, id := range e.ids {
			delete(s.deadIDs, id)
		}
	}
	s.emitted = s.emitted[n:]
	if write {
		s.saved, s.savedAt = *r, time.Now()
	}
	s.mu.Unlock()
	return nil
}

// Bury marks events DEAD with their reasons as last_error, as the polling
// relay does (`outbox dead list` shows them, `outbox dead retry` requeues
// them). Fenced by the lease.
func (s *Source) Bury(ctx context.Context, buried []source.Burial) error {
	if len(buried) == 0 {
		return nil
	}
	// marked first: a row whose burying failed is not deleted either, and
	// stays NEW for the next read of the table
	s.mu.Lock()
	for _, p := range buried {
		s.deadIDs[p.Event.ID] = true
	}
	s.mu.Unlock()
	err := s.fenced(ctx, func(tx *sql.Tx) error {
		for _, p := range buried {
			if _, err := tx.ExecContext(ctx, "UPDATE "+s.n.table+" SET status = 'DEAD', last_error = ?, attempts = ? WHERE id = ? AND status = 'NEW'",
				clip(p.Reason), p.Attempts, p.Event.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, source.ErrFenced) {
			return err
		}
		return fmt.Errorf("binlog: burying %d events: %w", len(buried), err)
	}
	return nil
}

// clip bounds a reason stored as last_error.
func clip(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if r := []rune(s); len(r) > 4000 {
		return string(r[:4000])
	}
	return s
}
