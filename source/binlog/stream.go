package binlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/source"
)

// errFatal marks a stream error that neither reconnecting nor reading the
// table can fix.
type errFatal struct{ err error }

func (e errFatal) Error() string { return e.err.Error() }
func (e errFatal) Unwrap() error { return e.err }

// errUntrusted: the log cannot be trusted from here for the outbox table;
// the source reads the table and streams on from a position taken then.
type errUntrusted struct{ reason string }

func (e errUntrusted) Error() string { return e.reason }

// stream keeps the binlog streaming until ctx ends or a fatal error:
// from saved, or, when nil, after reading first (the snapshot Start took). A lost connection
// reconnects (with backoff) after the last whole transaction read; a log
// that cannot be trusted (its position purged, a statement-format write
// to the table, …) makes it read the table again.
func (s *Source) stream(ctx context.Context, saved *resume, first *snapshot) {
	from := saved
	reason := ""
	delay := 200 * time.Millisecond
	for {
		if from == nil {
			var r resume
			var err error
			if first != nil {
				r, err = s.readSnapshot(ctx, first)
				first = nil
				reason = "the first read failed"
			} else {
				r, err = s.fallback(ctx, reason)
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				var fatal errFatal
				if errors.As(err, &fatal) || errors.Is(err, source.ErrFenced) {
					s.log.Error("outbox binlog: stopped", "table", s.cfg.Table, "error", err.Error())
					s.fail(err)
					return
				}
				s.log.Warn("outbox binlog: reading the table failed; retrying", "table", s.cfg.Table, "error", err.Error(), "in", delay)
				if !sleep(ctx, &delay) {
					return
				}
				continue
			}
			from = &r
		}
		began := time.Now()
		err := s.streamFrom(ctx, *from)
		if ctx.Err() != nil {
			return
		}
		var untrusted errUntrusted
		var lost errLogLost
		var fatal errFatal
		switch {
		case errors.As(err, &untrusted):
			reason, from = untrusted.reason, nil
			continue
		case errors.As(err, &lost):
			reason, from = lost.Error(), nil
			continue
		case errors.As(err, &fatal) || errors.Is(err, source.ErrFenced):
			s.log.Error("outbox binlog: streaming stopped", "table", s.cfg.Table, "error", err.Error())
			s.fail(err)
			return
		}
		if time.Since(began) > time.Minute {
			delay = 200 * time.Millisecond
		}
		s.mu.Lock()
		cur := s.streamed
		s.mu.Unlock()
		from = &cur
		s.log.Warn("outbox binlog: streaming interrupted; reconnecting", "table", s.cfg.Table, "from", cur.from().String(), "error", err.Error(), "in", delay)
		if !sleep(ctx, &delay) {
			return
		}
	}
}

// sleep waits about *delay (jittered) and doubles it, up to 10s; false
// when ctx ended.
func sleep(ctx context.Context, delay *time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(*delay/2 + rand.N(*delay/2+1)):
	}
	*delay = min(*delay*2, 10*time.Second)
	return true
}

// txnBuf is the transaction being read.
type txnBuf struct {
	gtid       *gtid
	standalone bool // a statement outside a transaction: its query event ends it
	rows       []decodedRow
}

// streamFrom streams from one connection until an error.
func (s *Source) streamFrom(ctx context.Context, from resume) error {
	if s.columns == nil {
		cols, err := s.readColumns(ctx)
		if err != nil {
			return err
		}
		s.columns = cols
	}
	c, err := dial(ctx, s.dial)
	if err != nil {
		var se *serverError
		if errors.As(err, &se) && (se.Code == 1045 || se.Code == 1044) {
			return errFatal{fmt.Errorf("%w: check the user and password of the database URL", err)}
		}
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	s.connID.Store(c.id)
	if err := c.startDump(s.cfg.ServerID, from.from(), s.cfg.Heartbeat, false); err != nil {
		var se *serverError
		if errors.As(err, &se) {
			switch se.Code {
			case 1236:
				return errLogLost{err}
			case 1045, 1227, 1044:
				return errFatal{fmt.Errorf("%w: GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO the user", err)}
			}
		}
		return err
	}
	s.log.Info("outbox binlog: streaming", "table", s.cfg.Table, "from", from.from().String(), "server_id", s.cfg.ServerID)
	d := newDecoder(s.checksum)
	file, pos := from.File, from.Pos
	gtids := parseGTIDs(from.GTID)
	ours := map[uint64]layout{}
	// XA transactions prepared in this stream, by xid: true when they
	// wrote outbox rows
	xa := map[string]bool{}
	var tx *txnBuf
	silence := max(3*s.cfg.Heartbeat, 5*time.Second)
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(silence))
		raw, err := c.readEvent()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("binlog: the server ended the stream")
			}
			return err
		}
		s.heardAt.Store(time.Now().UnixNano())
		ev, err := d.decode(raw)
		if err != nil {
			if errors.Is(err, errZstdPayload) {
				return errFatal{err}
			}
			return errUntrusted{err.Error()}
		}
		if r, ok := ev.Body.(rotate); ok {
			file, pos = r.File, uint32(r.Pos)
			continue
		}
		if ev.LogPos != 0 {
			pos = ev.LogPos
		} else if ev.Type != evFormatDescription && ev.Flags&flagArtificial == 0 && ev.Type != evHeartbeat {
			pos += ev.Size // MariaDB 11.4+ leaves end_log_pos 0
		}
		commit := false
		switch b := ev.Body.(type) {
		case mariaGTID:
			if tx != nil && len(tx.rows) > 0 {
				return errUntrusted{"a transaction that wrote the outbox table ended without a commit event"}
			}
			tx = &txnBuf{gtid: &gtid{Domain: b.Domain, Server: b.Server, Seq: b.Seq}, standalone: b.Standalone}
		case query:
			switch q := strings.ToUpper(strings.TrimSpace(b.Text)); {
			case strings.HasPrefix(q, "XA "):
				// a prepared XA transaction's rows were logged with its
				// XA PREPARE (see xaPrepare below); its XA COMMIT, a
				// group of its own, makes the source read the table
				verb, id := xaStatement(q)
				wrote, seen := xa[id]
				switch verb {
				case "COMMIT":
					if wrote {
						return errUntrusted{"an XA transaction that wrote the outbox table committed (its rows were logged at XA PREPARE)"}
					}
					if !seen {
						return errUntrusted{"an XA transaction prepared before the stream started committed: it may have written the outbox table"}
					}
					delete(xa, id)
					commit = true
				case "ROLLBACK":
					delete(xa, id)
					commit = true
				}
			case q == "BEGIN":
				if tx == nil {
					tx = &txnBuf{}
				}
			case q == "COMMIT":
				commit = true
			case q == "ROLLBACK":
				tx = nil
			default:
				if why := s.touches(b.Schema, b.Text); why != "" {
					return errUntrusted{why}
				}
				commit = tx == nil || tx.standalone
			}
		case *tableMapEvent:
			if b.Schema != s.n.schema || b.Table != s.cfg.Table {
				delete(ours, b.ID) // a table id names another table now
				continue
			}
			l, err := s.layoutFor(b)
			if err != nil {
				return errUntrusted{err.Error()}
			}
			ours[b.ID] = l
		case *rowsEv:
			l, ok := ours[b.TableID]
			if !ok || b.Kind == 'd' {
				continue
			}
			if tx == nil {
				tx = &txnBuf{}
			}
			rows, err := rowsOf(d.tables[b.TableID], l, b)
			if err != nil {
				return errUntrusted{err.Error()}
			}
			tx.rows = append(tx.rows, rows...)
		case xid:
			commit = true
		case xaPrepare:
			if !b.OnePhase && tx != nil {
				xa[b.ID] = len(tx.rows) > 0 // not committed yet: delivered after its XA COMMIT
				tx.rows = nil
			}
			commit = true
		}
		if !commit {
			continue
		}
		// table maps are sent again with every statement: forget them,
		// so that table ids reused for other tables are never mixed up
		// and the maps do not pile up on a long stream
		clear(d.tables)
		clear(ours)
		if tx != nil && tx.gtid != nil && gtids != nil {
			gtids[tx.gtid.Domain] = *tx.gtid
		}
		r := resume{File: file, Pos: pos, GTID: formatGTIDs(gtids)}
		var rows []decodedRow
		if tx != nil {
			rows = tx.rows
		}
		tx = nil
		if err := s.deliver(ctx, rows, &r, false); err != nil {
			return err
		}
		s.mu.Lock()
		s.streamed = r
		s.mu.Unlock()
	}
}

// rowsOf decodes the outbox rows of a rows event: an insert's rows, and an
// update's rows that it turned back to NEW (`outbox dead retry`).
func rowsOf(tm *tableMapEvent, l layout, ev *rowsEv) ([]decodedRow, error) {
	if tm == nil {
		return nil, fmt.Errorf("binlog: a rows event of table id %d came without its table map", ev.TableID)
	}
	imgs, err := decodeRows(tm, ev)
	if err != nil {
		return nil, err
	}
	var out []decodedRow
	for i := 0; i < len(imgs); i++ {
		img := imgs[i]
		var before decodedRow
		if ev.Kind == 'u' {
			if i+1 >= len(imgs) {
				return nil, fmt.Errorf("binlog: an update of %s.%s without its after image", tm.Schema, tm.Table)
			}
			if before, err = rowOf(l, img); err != nil {
				return nil, err
			}
			i++
			img = imgs[i]
		}
		d, err := rowOf(l, img)
		if err != nil {
			return nil, err
		}
		if d.status != string(outbox.StatusNew) || ev.Kind == 'u' && before.status == string(outbox.StatusNew) {
			continue
		}
		out = append(out, d)
	}
	return out, nil
}

// layoutFor maps a table map of the outbox table: by its column names
// when the server logs them, else by the table's definition as last read
// (which a change of the table makes the source read again).
func (s *Source) layoutFor(tm *tableMapEvent) (layout, error) {
	names := tm.Names
	if names == nil {
		if len(s.columns) != len(tm.Types) {
			return layout{}, fmt.Errorf("the table map of %s.%s has %d columns, the table %d: its definition changed", tm.Schema, tm.Table, len(tm.Types), len(s.columns))
		}
		names = s.columns
	}
	l, err := layoutOf(names)
	if err != nil {
		return l, fmt.Errorf("the table map of %s.%s does not match the outbox columns: %v", tm.Schema, tm.Table, err)
	}
	return l, nil
}

// deliver buries the rows that break the table contract and hands out the
// others as one transaction resumable at r.
func (s *Source) deliver(ctx context.Context, rows []decodedRow, r *resume, force bool) error {
	var bad []source.Burial
	events := make([]outbox.Event, 0, len(rows))
	ids := make([]int64, 0, len(rows))
	for _, d := range rows {
		if d.bad != nil {
			s.log.Warn("outbox binlog: burying an event that breaks the table contract", "id", d.ev.ID, "reason", d.bad.Error())
			bad = append(bad, source.Burial{Event: d.ev, Attempts: d.ev.Attempts, Reason: d.bad.Error()})
			continue
		}
		events = append(events, d.ev)
		ids = append(ids, d.ev.ID)
	}
	if len(bad) > 0 {
		if err := s.Bury(ctx, bad); err != nil {
			return err
		}
	}
	return s.push(ctx, source.Txn{Events: events}, ids, r, force)
}

// xaStatement splits an XA statement (upper-cased) into its verb and the
// xid it names.
func xaStatement(q string) (verb, id string) {
	f := strings.Fields(q)
	if len(f) < 2 {
		return "", ""
	}
	verb = f[1]
	if len(f) > 2 {
		id = strings.TrimSuffix(strings.TrimSuffix(strings.Join(f[2:], " "), " ONE PHASE"), " FOR MIGRATE")
	}
	return verb, id
}
