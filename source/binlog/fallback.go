package binlog

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// fallback reads the outbox table's undelivered rows (status NEW, in id
// order) in a consistent snapshot, hands them out, and returns the binlog
// position of that snapshot, where streaming goes on: MariaDB reports the
// binlog position matching a consistent snapshot (binlog_snapshot_file,
// binlog_snapshot_position), so every transaction before it is in the
// read and none after it. Rows handed out and not yet acknowledged are
// read again (duplicates, with the same event ids); nothing is missed.
func (s *Source) fallback(ctx context.Context, reason string) (resume, error) {
	snap, err := s.snapshot(ctx, reason)
	if err != nil {
		return resume{}, err
	}
	return s.readSnapshot(ctx, snap)
}

// snapshot is a consistent snapshot of the table, open on its own
// connection, and the binlog position it matches.
type snapshot struct {
	conn *sql.Conn
	at   resume
}

// snapshot counts and logs a fallback, reads the table's definition and
// opens a snapshot.
func (s *Source) snapshot(ctx context.Context, reason string) (*snapshot, error) {
	s.fallbacks.Add(1)
	s.log.Warn("outbox binlog: reading the undelivered rows from the table, then streaming on", "table", s.cfg.Table, "reason", reason)
	if s.cfg.OnFallback != nil {
		s.cfg.OnFallback(reason)
	}
	cols, err := s.readColumns(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := layoutOf(cols); err != nil {
		return nil, errFatal{fmt.Errorf("binlog: %s: %w", s.n.table, err)}
	}
	s.columns = cols
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	snap := &snapshot{conn: conn}
	if err := snap.open(ctx); err != nil {
		snap.close()
		return nil, err
	}
	return snap, nil
}

func (snap *snapshot) close() {
	_, _ = snap.conn.ExecContext(context.Background(), "ROLLBACK")
	snap.conn.Close()
}

func (snap *snapshot) open(ctx context.Context) error {
	conn := snap.conn
	if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return fmt.Errorf("binlog: starting the snapshot: %w", err)
	}
	r := &snap.at
	rows, err := conn.QueryContext(ctx, "SHOW STATUS LIKE 'binlog_snapshot_%'")
	if err != nil {
		return fmt.Errorf("binlog: reading the snapshot's binlog position: %w", err)
	}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			rows.Close()
			return err
		}
		switch strings.ToLower(name) {
		case "binlog_snapshot_file":
			r.File = value
		case "binlog_snapshot_position":
			p, _ := strconv.ParseUint(value, 10, 32)
			r.Pos = uint32(p)
		}
	}
	rows.Close()
	if r.File == "" || r.Pos == 0 {
		return errFatal{fmt.Errorf("binlog: the server reports no binlog position for a snapshot (binlog_snapshot_file %q): is log_bin on?", r.File)}
	}
	var g sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, ?)", r.File, r.Pos).Scan(&g); err != nil {
		return fmt.Errorf("binlog: reading the GTID position of %s:%d: %w", r.File, r.Pos, err)
	}
	r.GTID = g.String
	return nil
}

// readSnapshot hands out the snapshot's NEW rows, closes it, and returns
// its position.
func (s *Source) readSnapshot(ctx context.Context, snap *snapshot) (resume, error) {
	defer snap.close()
	after, total := int64(0), 0
	for {
		page, err := s.readPage(ctx, snap.conn, after)
		if err != nil {
			return resume{}, err
		}
		if len(page) == 0 {
			break
		}
		after = page[len(page)-1].ev.ID
		total += len(page)
		if err := s.deliver(ctx, page, nil, false); err != nil {
			return resume{}, err
		}
	}
	r := snap.at
	if err := s.deliver(ctx, nil, &r, true); err != nil {
		return resume{}, err
	}
	s.mu.Lock()
	s.streamed = r
	s.mu.Unlock()
	s.log.Info("outbox binlog: read the table", "table", s.cfg.Table, "rows", total, "streaming from", r.from().String())
	return r, nil
}

// readPage reads the next FallbackBatch NEW rows after id after.
func (s *Source) readPage(ctx context.Context, conn *sql.Conn, after int64) ([]decodedRow, error) {
	rows, err := conn.QueryContext(ctx, `SELECT id, event_id, topic, event_key, event_type, aggregate_type, schema_version, payload,
	content_type, headers, attempts, UNIX_TIMESTAMP(next_attempt_at), UNIX_TIMESTAMP(created_at)
FROM `+s.n.table+` WHERE status = 'NEW' AND id > ? ORDER BY id LIMIT ?`, after, s.cfg.FallbackBatch)
	if err != nil {
		return nil, fmt.Errorf("binlog: reading %s: %w", s.n.table, err)
	}
	defer rows.Close()
	var out []decodedRow
	for rows.Next() {
		var id int64
		var f rowFields
		var next, created string
		var headers []byte
		if err := rows.Scan(&id, &f.eventID, &f.topic, &f.key, &f.typ, &f.aggregateType, &f.schemaVersion, &f.payload,
			&f.contentType, &headers, &f.attempts, &next, &created); err != nil {
			return nil, fmt.Errorf("binlog: reading %s: %w", s.n.table, err)
		}
		f.headers, f.status = headers, "NEW"
		f.nextAttemptAt, f.createdAt = unixMicros(next), unixMicros(created)
		out = append(out, f.row(id))
	}
	return out, rows.Err()
}

// unixMicros reads UNIX_TIMESTAMP's decimal text (seconds.micros).
func unixMicros(s string) time.Time {
	sec, frac, _ := strings.Cut(s, ".")
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}
	}
	frac = (frac + "000000")[:6]
	us, _ := strconv.ParseInt(frac, 10, 64)
	return time.Unix(n, us*1000).UTC()
}

// readColumns reads the table's column names in their order.
func (s *Source) readColumns(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION", s.n.schema, s.cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("binlog: reading the columns of %s: %w", s.n.table, err)
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(cols) == 0 {
		return nil, errFatal{fmt.Errorf("binlog: the table %s does not exist: run `outbox migrate`", s.n.table)}
	}
	return cols, nil
}

// parseGTIDs reads a GTID position (domain-server-seq, comma-separated);
// nil when empty (unknown: the stream then keeps no GTID position).
func parseGTIDs(s string) map[uint32]gtid {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	out := map[uint32]gtid{}
	for _, part := range strings.Split(s, ",") {
		f := strings.Split(strings.TrimSpace(part), "-")
		if len(f) != 3 {
			return nil
		}
		d, e1 := strconv.ParseUint(f[0], 10, 32)
		sv, e2 := strconv.ParseUint(f[1], 10, 32)
		n, e3 := strconv.ParseUint(f[2], 10, 64)
		if e1 != nil || e2 != nil || e3 != nil {
			return nil
		}
		out[uint32(d)] = gtid{Domain: uint32(d), Server: uint32(sv), Seq: n}
	}
	return out
}

func formatGTIDs(m map[uint32]gtid) string {
	if len(m) == 0 {
		return ""
	}
	parts := make([]string, 0, len(m))
	for _, g := range m {
		parts = append(parts, g.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
