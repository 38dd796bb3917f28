package mysqlstore

import (
	"context"
	"math"
	"strings"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// Limits of one INSERT: MySQL's 65535 placeholders of a prepared statement
// (11 per row at most), and a byte budget well under the server's
// max_allowed_packet (16 MiB by default on MariaDB, 64 MiB on MySQL) even
// when the driver escapes every byte of a payload.
const (
	maxRowsPerInsert  = 5000
	maxBytesPerInsert = 4 << 20
)

// TIMESTAMP's range ends in 2038: a later AvailableAt is stored as its end.
var maxTimestamp = time.Unix(math.MaxInt32, 0)

const insertPrefix = " (event_id, topic, event_key, event_type, aggregate_type, schema_version, payload, content_type, headers, next_attempt_at) VALUES "

// buildInsert returns the statements and arguments that write msgs (already
// validated and normalized), in input order: InnoDB gives the rows of one
// INSERT increasing ids in VALUES order, and later statements higher ones.
func (s *Store) buildInsert(msgs []outbox.Message) (stmts []string, args [][]any) {
	for start := 0; start < len(msgs); {
		var b strings.Builder
		b.WriteString("INSERT INTO ")
		b.WriteString(s.table)
		b.WriteString(insertPrefix)
		a := make([]any, 0, min(len(msgs)-start, maxRowsPerInsert)*11)
		bytes, n := 0, 0
		for start+n < len(msgs) && n < maxRowsPerInsert {
			m := msgs[start+n]
			size := len(m.Payload) + len(m.Topic) + len(m.Key) + len(m.Type) + len(m.AggregateType) + 256
			headers := driver.EncodeHeaders(m.Headers)
			size += len(headers)
			if n > 0 && bytes+size > maxBytesPerInsert {
				break
			}
			if n > 0 {
				b.WriteByte(',')
			}
			a = append(a, strings.ToLower(m.EventID), m.Topic, m.Key, m.Type, m.AggregateType, m.SchemaVersion, m.Payload, m.ContentType, headers)
			switch at := m.AvailableAt; {
			case at.IsZero() || at.Unix() < 1:
				b.WriteString("(?,?,?,?,?,?,?,?,?,DEFAULT)")
			default:
				if at.After(maxTimestamp) {
					at = maxTimestamp
				}
				// An epoch, not a time.Time: the driver would format a
				// time.Time in its loc, which the server reads in the
				// session's time zone, and the two need not agree.
				b.WriteString("(?,?,?,?,?,?,?,?,?,FROM_UNIXTIME(?) + INTERVAL ? MICROSECOND)")
				a = append(a, at.Unix(), at.Nanosecond()/1000)
			}
			bytes += size
			n++
		}
		stmts = append(stmts, b.String())
		args = append(args, a)
		start += n
	}
	return stmts, args
}

// Enqueue writes msgs atomically: one autocommitted INSERT, or a transaction
// of its own when msgs need several.
func (s *Store) Enqueue(ctx context.Context, msgs ...outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	norm, err := driver.Prepare(s.opts, msgs)
	if err != nil {
		return err
	}
	stmts, args := s.buildInsert(norm)
	if len(stmts) == 1 {
		if _, err := s.db.ExecContext(ctx, stmts[0], args[0]...); err != nil {
			return wrap("enqueue", err)
		}
		s.signal()
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return wrap("enqueue", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	for i := range stmts {
		if _, err := tx.ExecContext(ctx, stmts[i], args[i]...); err != nil {
			return wrap("enqueue", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return wrap("enqueue", err)
	}
	s.signal()
	return nil
}

// EnqueueTx writes msgs with the caller's *sql.Tx (or *sql.Conn/*sql.DB):
// they commit or roll back with it. On a validation error nothing is sent.
func (s *Store) EnqueueTx(ctx context.Context, tx store.Execer, msgs ...outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	norm, err := driver.Prepare(s.opts, msgs)
	if err != nil {
		return err
	}
	stmts, args := s.buildInsert(norm)
	for i := range stmts {
		if _, err := tx.ExecContext(ctx, stmts[i], args[i]...); err != nil {
			return wrap("enqueue", err)
		}
	}
	s.signalAfterTx()
	return nil
}
