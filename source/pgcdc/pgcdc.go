package pgcdc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/source"
)

// Source streams an outbox table's inserts (or the table-less mode's
// logical messages) from a replication slot. It implements source.Source.
// Start it, then hand it to relay.NewSource.
type Source struct {
	cfg  Config
	n    names
	pool *pgxpool.Pool
	log  *slog.Logger

	epoch int64 // the lease epoch, set by Start; fences every write

	mu        sync.Mutex
	wake      chan struct{} // Next waits on it (cap 1)
	room      chan struct{} // the stream waits on it when the buffer is full (cap 1)
	buf       []source.Txn
	bufEvents int
	emitted   []emitted      // handed out, not yet acknowledged
	deadIDs   map[int64]bool // table mode: rows buried, not to be deleted
	acked     pglogrepl.LSN  // the highest position acknowledged
	lastEnd   pglogrepl.LSN  // end of the last transaction buffered
	idleEnd   pglogrepl.LSN  // the server's sent position, from keepalives
	inTxn     bool
	curXid    uint32 // the open transaction's id; the stream's goroutine only
	failed    error  // fatal: Next returns it
	polled    bool   // a recovery poll's rows are handed out (or there were none)
	started   bool
	closed    bool

	cancel context.CancelFunc
	done   sync.WaitGroup
}

// emitted is a transaction handed out: its position and (table mode) the
// row ids to delete once it is acknowledged.
type emitted struct {
	pos pglogrepl.LSN
	xid uint32 // the streamed transaction's id (0: the recovery poll)
	ids []int64
	// recovery: the recovery poll's rows; once they are acknowledged the
	// state's recover_lsn is cleared
	recovery bool
}

var _ source.Source = (*Source)(nil)

// pushHook, set by benchmarks only, sees each streamed transaction's
// events as the source buffers them (the latency benchmark's middle
// timestamp: decoded, not yet delivered).
var pushHook atomic.Pointer[func([]outbox.Event)]

// New returns a Source reading through pool (which stays the caller's to
// close); the replication connection uses the pool's connection settings
// with replication=database. The role needs the REPLICATION attribute (or
// to be a superuser) and, for Setup, to own the table.
func New(pool *pgxpool.Pool, cfg Config) (*Source, error) {
	if pool == nil {
		return nil, errors.New("pgcdc: pool is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Source{cfg: cfg, n: cfg.names(), pool: pool, log: cfg.Logger,
		wake: make(chan struct{}, 1), room: make(chan struct{}, 1), deadIDs: map[int64]bool{}}, nil
}

// Config returns the configuration with its defaults filled.
func (s *Source) Config() Config { return s.cfg }

// Epoch is the fencing epoch of the lease Start took.
func (s *Source) Epoch() int64 { return s.epoch }

// Start checks wal_level (refusing anything but logical, naming the fix),
// runs Setup, waits until it holds the streaming lease (another process
// may hold it: Start returns once that one stopped renewing it, or when
// ctx ends), makes the slot ready (creating it, or recovering a lost one)
// and starts streaming, which goes on in the background until Close or a
// fatal error, which Next then returns. A slot that cannot be recovered
// (ErrSlotLost) is Start's error.
func (s *Source) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("pgcdc: Start called twice")
	}
	s.started = true
	s.mu.Unlock()
	if err := CheckWALLevel(ctx, s.pool); err != nil {
		return err
	}
	if err := Setup(ctx, s.pool, s.cfg); err != nil {
		return err
	}
	if err := s.acquireLease(ctx); err != nil {
		return err
	}
	bg, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.done.Add(1)
	go func() { defer s.done.Done(); s.renewLease(bg) }()
	conn, err := s.connect(ctx)
	if err != nil {
		var fatal errFatal
		if errors.As(err, &fatal) || ctx.Err() != nil {
			s.Close()
			return err
		}
		s.log.Warn("outbox cdc: streaming did not start; retrying in the background", "slot", s.cfg.Slot, "error", err.Error())
		conn = nil
	}
	s.done.Add(2)
	go func() { defer s.done.Done(); s.heartbeat(bg) }()
	go func() { defer s.done.Done(); s.stream(bg, conn) }()
	return nil
}

// Close stops streaming and waits for the background work. Positions not
// acknowledged are streamed again by the next Start.
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
	// give the lease up so that a successor need not wait for it to expire
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if s.epoch != 0 {
		_, _ = s.pool.Exec(ctx, "UPDATE "+s.n.state+" SET lease_until = NULL WHERE slot = $1 AND owner = $2 AND epoch = $3", s.cfg.Slot, s.cfg.Owner, s.epoch)
	}
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

// Next returns the committed transactions decoded so far, waiting for at
// least one.
func (s *Source) Next(ctx context.Context) ([]source.Txn, error) {
	for {
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

// push buffers one committed transaction for Next.
func (s *Source) push(t source.Txn, end pglogrepl.LSN, xid uint32, ids []int64) {
	if h := pushHook.Load(); h != nil {
		(*h)(t.Events)
	}
	s.mu.Lock()
	s.buf = append(s.buf, t)
	s.bufEvents += len(t.Events)
	s.emitted = append(s.emitted, emitted{pos: pglogrepl.LSN(t.Pos), xid: xid, ids: ids})
	if end > s.lastEnd {
		s.lastEnd = end
	}
	s.mu.Unlock()
	signal(s.wake)
}

// Ack deletes the delivered rows of the transactions up to pos (table
// mode, in batches of DeleteBatch, fenced by the lease) and lets the slot's
// confirmed flush position advance to pos.
func (s *Source) Ack(ctx context.Context, pos source.Position) error {
	s.mu.Lock()
	n := 0
	var ids, xids []int64
	recovery := false
	for n < len(s.emitted) && s.emitted[n].pos <= pglogrepl.LSN(pos) {
		recovery = recovery || s.emitted[n].recovery
		if x := s.emitted[n].xid; x != 0 && len(s.emitted[n].ids) > 0 {
			xids = append(xids, int64(x))
		}
		for _, id := range s.emitted[n].ids {
			if !s.deadIDs[id] {
				ids = append(ids, id)
			}
		}
		n++
	}
	s.mu.Unlock()
	if len(ids) > 0 {
		if err := s.waitVisible(ctx, xids); err != nil {
			return err
		}
	}
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), s.cfg.DeleteBatch)]
		ids = ids[len(chunk):]
		if err := s.fenced(ctx, "DELETE FROM "+s.n.table+" WHERE id = ANY($1) AND status = 'NEW'", chunk); err != nil {
			return fmt.Errorf("pgcdc: deleting %d delivered rows: %w", len(chunk), err)
		}
	}
	if recovery {
		if err := s.recovered(ctx); err != nil {
			return err
		}
	}
	s.mu.Lock()
	for _, e := range s.emitted[:n] {
		for _, id := range e.ids {
			delete(s.deadIDs, id)
		}
	}
	s.emitted = s.emitted[n:]
	if pglogrepl.LSN(pos) > s.acked {
		s.acked = pglogrepl.LSN(pos)
	}
	s.mu.Unlock()
	return nil
}

// recovered records that the rows committed before the slot's start are
// delivered (fenced): the next holder need not poll for them.
func (s *Source) recovered(ctx context.Context) error {
	if err := s.fenced(ctx, "UPDATE "+s.n.state+" SET recover_lsn = '' WHERE slot = $1", s.cfg.Slot); err != nil {
		return fmt.Errorf("pgcdc: recording that the slot's first rows are delivered: %w", err)
	}
	return nil
}

// waitVisible waits until the transactions xids have ended in every
// respect. The server streams a commit once its WAL is flushed, which is
// before the committing backend leaves the process array: until then a
// new snapshot still sees the transaction as running and its rows as
// invisible, and a DELETE of them would remove nothing while the slot
// moves past them (rows stranded NEW). A transaction releases its xid
// lock after it left the process array, so once the lock is gone every
// later statement sees its rows.
func (s *Source) waitVisible(ctx context.Context, xids []int64) error {
	if len(xids) == 0 {
		return nil
	}
	delay := time.Millisecond
	for {
		var running bool
		err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'transactionid' AND transactionid::text::bigint = ANY($1))", xids).Scan(&running)
		if err != nil {
			return fmt.Errorf("pgcdc: checking that the delivered transactions have ended: %w", err)
		}
		if !running {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
}

// Bury records events as DEAD: in table mode their rows become DEAD with
// the reason as last_error; in table-less mode they are inserted, DEAD,
// into <table>_dead. Fenced by the lease.
func (s *Source) Bury(ctx context.Context, buried []source.Burial) error {
	if len(buried) == 0 {
		return nil
	}
	if !s.cfg.TableLess {
		ids := make([]int64, len(buried))
		reasons := make([]string, len(buried))
		attempts := make([]int32, len(buried))
		for i, p := range buried {
			ids[i], reasons[i], attempts[i] = p.Event.ID, clip(p.Reason), int32(p.Attempts)
		}
		s.mu.Lock()
		for _, id := range ids {
			s.deadIDs[id] = true
		}
		s.mu.Unlock()
		err := s.fenced(ctx, `UPDATE `+s.n.table+` t SET status = 'DEAD', last_error = u.reason, attempts = u.attempts
FROM unnest($1::bigint[], $2::text[], $3::int[]) AS u(id, reason, attempts)
WHERE t.id = u.id AND t.status = 'NEW'`, ids, reasons, attempts)
		if err != nil {
			return fmt.Errorf("pgcdc: burying %d events: %w", len(buried), err)
		}
		return nil
	}
	var b pgx.Batch
	for _, p := range buried {
		e := buriable(p.Event)
		headers := []byte("{}")
		if len(e.Headers) > 0 {
			headers, _ = json.Marshal(e.Headers)
		}
		created := e.CreatedAt
		if created.IsZero() {
			created = time.Now()
		}
		b.Queue(`INSERT INTO `+s.n.buried+` (event_id, topic, event_key, event_type, aggregate_type, schema_version, payload, content_type, headers, status, attempts, last_error, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::text::jsonb, 'DEAD', $10, $11, $12)
ON CONFLICT (event_id) DO NOTHING`,
			e.EventID, e.Topic, e.Key, e.Type, e.AggregateType, max(e.SchemaVersion, 0),
			e.Payload, e.ContentType, string(headers), p.Attempts, clip(p.Reason), created)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgcdc: burying %d events: %w", len(buried), err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit a no-op
	if err := s.checkLease(ctx, tx); err != nil {
		return err
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("pgcdc: burying %d events in %s: %w", len(buried), s.n.buried, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgcdc: burying %d events: %w", len(buried), err)
	}
	return nil
}

// fenced runs stmt in a transaction that first locks the lease row and
// checks that this process still holds it; source.ErrFenced when it does
// not.
func (s *Source) fenced(ctx context.Context, stmt string, args ...any) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit a no-op
	if err := s.checkLease(ctx, tx); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, stmt, args...); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// checkLease locks the lease row (FOR SHARE: a takeover waits for this
// write) and checks that it is still ours.
func (s *Source) checkLease(ctx context.Context, tx pgx.Tx) error {
	var ok bool
	err := tx.QueryRow(ctx, "SELECT lease_until > now() FROM "+s.n.state+" WHERE slot = $1 AND owner = $2 AND epoch = $3 FOR SHARE",
		s.cfg.Slot, s.cfg.Owner, s.epoch).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && !ok {
		s.fail(source.ErrFenced)
		return source.ErrFenced
	}
	return err
}

// clip bounds a reason stored as last_error.
func clip(s string) string { return clipText(s, 4000) }

// eventsOf is the events of decoded rows that are fit to deliver.
func eventsOf(rows []decodedRow) []outbox.Event {
	out := make([]outbox.Event, 0, len(rows))
	for i := range rows {
		if rows[i].bad == nil {
			out = append(out, rows[i].ev)
		}
	}
	return out
}
