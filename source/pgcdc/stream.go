package pgcdc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/source"
)

// errFatal marks a stream error that reconnecting cannot fix.
type errFatal struct{ err error }

func (e errFatal) Error() string { return e.err.Error() }
func (e errFatal) Unwrap() error { return e.err }

// stream keeps the replication connection conn (opened by Start)
// streaming until ctx ends or a fatal error; other errors (the connection
// dropped, the server restarted, the slot vanished) reconnect with
// backoff.
func (s *Source) stream(ctx context.Context, conn *pgconn.PgConn) {
	delay := 200 * time.Millisecond
	for {
		began := time.Now()
		var err error
		if conn == nil {
			conn, err = s.connect(ctx)
		}
		if err == nil {
			err = s.receive(ctx, conn)
		}
		if conn != nil {
			if ctx.Err() != nil {
				s.finalStatus(conn)
			}
			conn.Close(context.Background())
			conn = nil
		}
		if ctx.Err() != nil {
			return
		}
		var fatal errFatal
		if errors.As(err, &fatal) || errors.Is(err, source.ErrFenced) {
			s.log.Error("outbox cdc: streaming stopped", "slot", s.cfg.Slot, "error", err.Error())
			s.fail(err)
			return
		}
		if time.Since(began) > time.Minute {
			delay = 200 * time.Millisecond
		}
		s.log.Warn("outbox cdc: streaming interrupted; reconnecting", "slot", s.cfg.Slot, "error", err.Error(), "in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay/2 + rand.N(delay/2+1)):
		}
		delay = min(delay*2, 10*time.Second)
	}
}

// replicationConn opens a replication connection with the pool's
// settings and the text formats decodeRow reads.
func (s *Source) replicationConn(ctx context.Context) (*pgconn.PgConn, error) {
	pc := s.pool.Config().ConnConfig.Config.Copy()
	pc.RuntimeParams["replication"] = "database"
	pc.RuntimeParams["DateStyle"] = "ISO"
	pc.RuntimeParams["TimeZone"] = "UTC"
	pc.RuntimeParams["bytea_output"] = "hex"
	if pc.RuntimeParams["application_name"] == "" {
		pc.RuntimeParams["application_name"] = "outbox-cdc"
	}
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("pgcdc: replication connection: %w (the role needs REPLICATION, and pg_hba.conf must allow it)", err)
	}
	return conn, nil
}

// connect opens a replication connection, makes the slot ready and starts
// streaming from it.
func (s *Source) connect(ctx context.Context) (*pgconn.PgConn, error) {
	conn, err := s.replicationConn(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.startStreaming(ctx, conn); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

func (s *Source) startStreaming(ctx context.Context, conn *pgconn.PgConn) error {
	if err := s.ensureSlot(ctx, conn); err != nil {
		return err
	}
	args := []string{"proto_version '" + replicationOutputProto + "'", "publication_names '" + s.cfg.Publication + "'"}
	if s.cfg.TableLess {
		args = append(args, "messages 'true'")
	}
	if err := pglogrepl.StartReplication(ctx, conn, s.cfg.Slot, 0, pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: args}); err != nil {
		return fmt.Errorf("pgcdc: starting replication from slot %s: %w", s.cfg.Slot, err)
	}
	s.log.Debug("outbox cdc: streaming", "slot", s.cfg.Slot)
	return nil
}

var snapshotName = regexp.MustCompile(`^[0-9A-Fa-f-]+$`)

// slotInfoHook, set by tests only, sees (and may change) what ensureSlot
// read of a slot: the way to test an invalidated slot (wal_status lost)
// without making the server remove WAL.
var slotInfoHook atomic.Pointer[func(slot string, si *slotInfo)]

// ensureSlot makes the slot ready to stream: it terminates a stale
// holder's walsender (this process holds the lease), detects a lost or
// vanished slot, and creates the slot when needed. A slot is created with
// an exported snapshot, and in table mode the rows still NEW in that
// snapshot (committed before the slot's start, so never to be streamed:
// the rows a lost slot did not deliver, or those of a table that was
// polled before) are read in it and delivered first.
func (s *Source) ensureSlot(ctx context.Context, conn *pgconn.PgConn) error {
	si, err := readSlot(ctx, s.pool, s.cfg.Slot)
	if err != nil {
		return err
	}
	if h := slotInfoHook.Load(); h != nil {
		(*h)(s.cfg.Slot, &si)
	}
	var db string
	if err := s.pool.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		return err
	}
	if si.exists && (si.plugin != "pgoutput" || si.database != db) {
		return errFatal{fmt.Errorf("pgcdc: slot %s exists for plugin %q in database %q, not pgoutput in %q: name another slot", s.cfg.Slot, si.plugin, si.database, db)}
	}
	if si.exists && si.active {
		// Only the lease holder may end a walsender, and it checks that it
		// holds the lease in the same transaction (the lease row locked):
		// a process that stalled past its lease and reconnects on waking
		// must not end the stream of the process that holds it now. It
		// stops with source.ErrFenced instead.
		if err := s.fenced(ctx, "SELECT pg_terminate_backend($1)", si.activePID); err != nil {
			if errors.Is(err, source.ErrFenced) {
				s.log.Error("outbox cdc: the slot is streamed by the process that took the lease over; stopping", "slot", s.cfg.Slot, "pid", si.activePID, "epoch", s.epoch)
			}
			return err
		}
		s.log.Warn("outbox cdc: the slot was streamed by a process that lost the lease; terminated its walsender", "slot", s.cfg.Slot, "pid", si.activePID, "owner", s.cfg.Owner, "epoch", s.epoch)
		for i := 0; i < 100 && si.exists && si.active; i++ {
			time.Sleep(100 * time.Millisecond)
			if si, err = readSlot(ctx, s.pool, s.cfg.Slot); err != nil {
				return err
			}
		}
	}
	lost := false
	if si.exists && si.walStatus == "lost" {
		lost = true
		s.log.Error("outbox cdc: the slot was invalidated (wal_status lost): the server removed WAL it had not delivered; recreating it", "slot", s.cfg.Slot)
		if _, err := s.pool.Exec(ctx, "SELECT pg_drop_replication_slot($1)", s.cfg.Slot); err != nil {
			return fmt.Errorf("pgcdc: dropping the lost slot %s: %w", s.cfg.Slot, err)
		}
		si.exists = false
	}
	var had, recovering string
	if err := s.pool.QueryRow(ctx, "SELECT slot_lsn, recover_lsn FROM "+s.n.state+" WHERE slot = $1", s.cfg.Slot).Scan(&had, &recovering); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if si.exists {
		confirmed, err := pglogrepl.ParseLSN(si.confirmed)
		if err != nil {
			return fmt.Errorf("pgcdc: slot %s confirmed_flush_lsn %q: %w", s.cfg.Slot, si.confirmed, err)
		}
		s.mu.Lock()
		s.acked = max(s.acked, confirmed)
		polled := s.polled
		s.mu.Unlock()
		if recovering != "" && !s.cfg.TableLess && !polled {
			// The process that created the slot had read the rows
			// committed before its start (which the stream does not
			// carry) and stopped before they were all delivered: read
			// the NEW rows again, now, and deliver them first. Those
			// committed after the slot's start come again from the
			// stream (duplicates, with the same event ids).
			n, err := s.recoveryPoll(ctx, "", confirmed)
			if err != nil {
				return fmt.Errorf("pgcdc: reading the rows committed before slot %s started again: %w", s.cfg.Slot, err)
			}
			s.log.Warn("outbox cdc: the slot's first rows were not all delivered by the process that created it; polling the table again", "slot", s.cfg.Slot, "rows", n)
		}
		return nil
	}
	if had != "" && !lost {
		lost = true
		s.log.Error("outbox cdc: the slot this source created has vanished (dropped behind its back); recreating it", "slot", s.cfg.Slot, "created_at_lsn", had)
	}
	if lost && s.cfg.TableLess {
		return errFatal{fmt.Errorf("%w: slot %s (created at %s) was lost or dropped, and with it the table-less events it had not delivered, which live only in the WAL: nothing can recover them. After checking with the producers, run `outbox cdc drop-slot --slot %s --table-less --force` to start over with a new slot", ErrSlotLost, s.cfg.Slot, had, s.cfg.Slot)}
	}
	if !s.cfg.TableLess {
		// Marked before the slot exists: whoever streams it next polls
		// the table again until the rows committed before its start are
		// delivered (see Ack).
		if err := s.fenced(ctx, "UPDATE "+s.n.state+" SET recover_lsn = 'creating' WHERE slot = $1", s.cfg.Slot); err != nil {
			return err
		}
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, s.cfg.Slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		return fmt.Errorf("pgcdc: creating slot %s: %w", s.cfg.Slot, err)
	}
	cp, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return fmt.Errorf("pgcdc: slot %s consistent point %q: %w", s.cfg.Slot, res.ConsistentPoint, err)
	}
	s.log.Info("outbox cdc: created the replication slot", "slot", s.cfg.Slot, "lsn", cp)
	if !s.cfg.TableLess {
		if !snapshotName.MatchString(res.SnapshotName) {
			return fmt.Errorf("pgcdc: slot %s: unexpected snapshot name %q", s.cfg.Slot, res.SnapshotName)
		}
		n, err := s.recoveryPoll(ctx, res.SnapshotName, cp)
		if err != nil {
			// the slot starts after rows this poll did not read: drop it,
			// so that the next attempt polls again
			_, _ = conn.Exec(context.Background(), "DROP_REPLICATION_SLOT "+s.cfg.Slot).ReadAll()
			return fmt.Errorf("pgcdc: reading the undelivered rows after creating slot %s: %w", s.cfg.Slot, err)
		}
		if n > 0 || lost {
			s.log.Warn("outbox cdc: delivering the rows committed before the slot started by polling the table", "slot", s.cfg.Slot, "rows", n, "slot_was_lost", lost)
		}
	}
	if err := s.fenced(ctx, "UPDATE "+s.n.state+" SET slot_lsn = $1, recover_lsn = CASE WHEN recover_lsn = '' THEN '' ELSE $1 END WHERE slot = $2", cp.String(), s.cfg.Slot); err != nil {
		return err
	}
	s.mu.Lock()
	s.acked = max(s.acked, cp)
	s.lastEnd = max(s.lastEnd, cp)
	s.mu.Unlock()
	return nil
}

// rowColumns selects the contract's columns as the text decodeRow reads,
// in colNames order.
const rowColumns = `id::text, event_id::text, topic::text, event_key::text, event_type::text, aggregate_type::text,
schema_version::text, '\x' || encode(payload, 'hex'), content_type::text, headers::text, status::text, attempts::text,
to_char(next_attempt_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || '+00',
to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || '+00'`

// identity is the relation of rowColumns.
var identity = func() *relation {
	r := &relation{}
	for i := range r.pos {
		r.pos[i] = i
	}
	return r
}()

func scanRow(row pgx.Row) (decodedRow, error) {
	var vals [numCols]*string
	dest := make([]any, numCols)
	for i := range vals {
		dest[i] = &vals[i]
	}
	if err := row.Scan(dest...); err != nil {
		return decodedRow{}, err
	}
	cols := make([]*pglogrepl.TupleDataColumn, numCols)
	for i, v := range vals {
		if v == nil {
			cols[i] = &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull}
			continue
		}
		cols[i] = &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(*v)}
	}
	return decodeRow(identity, cols)
}

// recoveryPoll reads the NEW rows of the exported snapshot (or, with
// snapshot "", of a new one) and buffers them as one transaction at the
// slot's consistent (or confirmed) position cp. Its acknowledgement clears
// the state's recover_lsn. With no row, it clears it at once.
func (s *Source) recoveryPoll(ctx context.Context, snapshot string, cp pglogrepl.LSN) (int, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	if snapshot != "" {
		if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+snapshot+"'"); err != nil {
			return 0, err
		}
	}
	// ORDER BY o.id, not id: the output column id::text is named id too,
	// and an unqualified name sorts by it, as text (107 before 11)
	rows, err := tx.Query(ctx, "SELECT "+rowColumns+" FROM "+s.n.table+" AS o WHERE status = 'NEW' ORDER BY o.id")
	if err != nil {
		return 0, err
	}
	var got []decodedRow
	for rows.Next() {
		d, err := scanRow(rows)
		if err != nil {
			rows.Close()
			return 0, err
		}
		got = append(got, d)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	if err := s.buryBad(ctx, got, cp); err != nil {
		return 0, err
	}
	evs := eventsOf(got)
	s.mu.Lock()
	s.polled = true
	s.mu.Unlock()
	if len(evs) == 0 {
		if err := s.recovered(ctx); err != nil {
			return 0, err
		}
		return len(got), nil
	}
	s.mu.Lock()
	s.buf = append(s.buf, source.Txn{Pos: source.Position(cp), Events: evs})
	s.bufEvents += len(evs)
	s.emitted = append(s.emitted, emitted{pos: cp, ids: idsOf(evs), recovery: true})
	s.lastEnd = max(s.lastEnd, cp)
	s.mu.Unlock()
	signal(s.wake)
	return len(got), nil
}

func idsOf(evs []outbox.Event) []int64 {
	ids := make([]int64, len(evs))
	for i := range evs {
		ids[i] = evs[i].ID
	}
	return ids
}

// buryBad buries the rows that break the table contract.
func (s *Source) buryBad(ctx context.Context, rows []decodedRow, pos pglogrepl.LSN) error {
	var buried []source.Burial
	for _, d := range rows {
		if d.bad != nil {
			s.log.Warn("outbox cdc: burying an event that breaks the table contract", "id", d.ev.ID, "reason", d.bad.Error())
			buried = append(buried, source.Burial{Event: d.ev, Pos: source.Position(pos), Attempts: 0, Reason: d.bad.Error()})
		}
	}
	return s.Bury(ctx, buried)
}

// receive decodes the stream until it fails or ctx ends.
func (s *Source) receive(ctx context.Context, conn *pgconn.PgConn) error {
	rels := map[uint32]*relation{}
	var cur []decodedRow
	var commitTime time.Time
	var received pglogrepl.LSN
	nextStatus := time.Now()
	// one receive context per status interval, not one per message
	var rc receiveCtx
	defer rc.stop()
	for {
		if !time.Now().Before(nextStatus) {
			if err := s.sendStatus(ctx, conn, received); err != nil {
				return err
			}
			nextStatus = time.Now().Add(s.cfg.StatusInterval)
		}
		s.mu.Lock()
		full := s.bufEvents >= s.cfg.MaxBuffered
		s.mu.Unlock()
		if full {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-s.room:
			case <-time.After(time.Until(nextStatus)):
			}
			continue
		}
		msg, err := conn.ReceiveMessage(rc.until(ctx, nextStatus))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("pgcdc: receiving: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("pgcdc: the server ended the stream: %w", pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return errors.New("pgcdc: the server ended the stream")
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return fmt.Errorf("pgcdc: keepalive: %w", err)
				}
				s.mu.Lock()
				if !s.inTxn && pkm.ServerWALEnd > s.idleEnd {
					s.idleEnd = pkm.ServerWALEnd
				}
				s.mu.Unlock()
				if pkm.ReplyRequested {
					nextStatus = time.Time{}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					return fmt.Errorf("pgcdc: XLogData: %w", err)
				}
				received = max(received, xld.WALStart)
				if err := s.handle(ctx, xld.WALData, rels, &cur, &commitTime); err != nil {
					return err
				}
			}
		}
	}
}

// handle decodes one pgoutput record.
func (s *Source) handle(ctx context.Context, data []byte, rels map[uint32]*relation, cur *[]decodedRow, commitTime *time.Time) error {
	if len(data) == 0 {
		return nil
	}
	m, err := pglogrepl.Parse(data)
	if err != nil {
		s.log.Debug("outbox cdc: skipping a record it does not read", "type", string(data[:1]), "error", err.Error())
		return nil
	}
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		if m.RelationName == s.cfg.Table && (s.cfg.Schema == "" || m.Namespace == s.cfg.Schema) && !s.cfg.TableLess {
			rels[m.RelationID] = newRelation(m)
		} else {
			delete(rels, m.RelationID)
		}
	case *pglogrepl.BeginMessage:
		s.mu.Lock()
		s.inTxn = true
		s.mu.Unlock()
		s.curXid = m.Xid
		*cur = (*cur)[:0]
		*commitTime = m.CommitTime
	case *pglogrepl.InsertMessage:
		rel := rels[m.RelationID]
		if rel == nil {
			return nil
		}
		d, err := decodeRow(rel, m.Tuple.Columns)
		if err != nil {
			s.log.Error("outbox cdc: skipping a row it cannot identify", "error", err.Error())
			return nil
		}
		if d.status == string(outbox.StatusNew) {
			*cur = append(*cur, d)
		}
	case *pglogrepl.UpdateMessage:
		// `outbox dead retry` makes a DEAD row NEW again
		rel := rels[m.RelationID]
		if rel == nil || m.NewTuple == nil {
			return nil
		}
		d, err := decodeRow(rel, m.NewTuple.Columns)
		if errors.Is(err, errToasted) {
			if d, err = s.readRow(ctx, d.ev.ID); err != nil {
				return err
			}
		} else if err != nil {
			s.log.Error("outbox cdc: skipping a row it cannot identify", "error", err.Error())
			return nil
		}
		if d.status == string(outbox.StatusNew) && d.ev.ID != 0 {
			*cur = append(*cur, d)
		}
	case *pglogrepl.LogicalDecodingMessage:
		if s.cfg.TableLess && m.Transactional && m.Prefix == s.cfg.Prefix {
			*cur = append(*cur, decodeMessage(m.LSN, m.Content, *commitTime))
		}
	case *pglogrepl.CommitMessage:
		end := m.TransactionEndLSN
		s.mu.Lock()
		s.inTxn = false
		replay := end <= s.lastEnd
		s.mu.Unlock()
		rows := *cur
		*cur = nil
		if replay || len(rows) == 0 {
			return nil // buffered already (a reconnect replays from the slot), or nothing for us
		}
		if err := s.buryBad(ctx, rows, end); err != nil {
			return err
		}
		evs := eventsOf(rows)
		var ids []int64
		if !s.cfg.TableLess {
			ids = idsOf(evs)
		}
		s.push(source.Txn{Pos: source.Position(end), Events: evs}, end, s.curXid, ids)
	}
	return nil
}

// readRow reads one row by id (an UPDATE whose payload was not resent).
func (s *Source) readRow(ctx context.Context, id int64) (decodedRow, error) {
	d, err := scanRow(s.pool.QueryRow(ctx, "SELECT "+rowColumns+" FROM "+s.n.table+" WHERE id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return decodedRow{}, nil
	}
	return d, err
}

// sendStatus reports the flush position: the acknowledged one, or, when
// every transaction handed out is acknowledged and none is open, the
// server's sent position (which moves on with WAL of other tables and
// databases, and with the heartbeat), so that an idle slot retains no WAL.
func (s *Source) sendStatus(ctx context.Context, conn *pgconn.PgConn, received pglogrepl.LSN) error {
	s.mu.Lock()
	flush := s.acked
	if !s.inTxn && s.acked >= s.lastEnd && len(s.buf) == 0 && s.idleEnd > flush {
		flush = s.idleEnd
	}
	s.mu.Unlock()
	if flush == 0 {
		return nil
	}
	err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: max(received, flush), WALFlushPosition: flush, WALApplyPosition: flush, ReplyRequested: true})
	if err != nil {
		return fmt.Errorf("pgcdc: sending the standby status: %w", err)
	}
	return nil
}

// finalStatus reports the acknowledged position once more when the source
// stops, and ends the stream so that the server has taken it in before the
// connection closes: without it, what was acknowledged since the last
// status interval would be streamed again by the next Start.
func (s *Source) finalStatus(conn *pgconn.PgConn) {
	s.mu.Lock()
	flush := s.acked
	s.mu.Unlock()
	if flush == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: flush, WALFlushPosition: flush, WALApplyPosition: flush})
	if err == nil {
		_, err = pglogrepl.SendStandbyCopyDone(ctx, conn)
	}
	if err != nil {
		s.log.Warn("outbox cdc: could not report the acknowledged position at stop; the next start streams its transactions again (same event ids)", "slot", s.cfg.Slot, "error", err.Error())
	}
}

// heartbeat writes a non-transactional logical message every Heartbeat, so
// that the server has WAL of this database to decode and report past even
// when nobody writes to it.
func (s *Source) heartbeat(ctx context.Context) {
	if s.cfg.Heartbeat < 0 {
		return
	}
	t := time.NewTicker(s.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, s.cfg.Heartbeat)
		_, err := s.pool.Exec(hctx, "SELECT pg_logical_emit_message(false, $1, '')", s.cfg.Prefix+heartbeatPrefixSuffix)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("outbox cdc: heartbeat failed", "error", err.Error())
		}
	}
}

// receiveCtx is a context with a deadline, made anew only when the
// deadline changes.
type receiveCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
	end    time.Time
}

func (r *receiveCtx) until(parent context.Context, end time.Time) context.Context {
	if r.ctx == nil || !r.end.Equal(end) {
		r.stop()
		r.ctx, r.cancel = context.WithDeadline(parent, end)
		r.end = end
	}
	return r.ctx
}

func (r *receiveCtx) stop() {
	if r.cancel != nil {
		r.cancel()
	}
}
