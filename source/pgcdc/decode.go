package pgcdc

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/driver"
)

// The outbox table's columns the source reads, by the table contract.
const (
	colID = iota
	colEventID
	colTopic
	colKey
	colType
	colAggregateType
	colSchemaVersion
	colPayload
	colContentType
	colHeaders
	colStatus
	colAttempts
	colNextAttemptAt
	colCreatedAt
	numCols
)

var colNames = [numCols]string{"id", "event_id", "topic", "event_key", "event_type", "aggregate_type", "schema_version",
	"payload", "content_type", "headers", "status", "attempts", "next_attempt_at", "created_at"}

// required are the columns without which a row cannot be delivered.
var required = [...]int{colID, colEventID, colTopic, colPayload}

// relation maps the contract's columns to their positions in a Relation
// message (-1: missing).
type relation struct {
	pos     [numCols]int
	missing string // a required column that is not there
}

func newRelation(m *pglogrepl.RelationMessage) *relation {
	r := &relation{}
	for i := range r.pos {
		r.pos[i] = -1
	}
	for i, c := range m.Columns {
		for j, name := range colNames {
			if c.Name == name {
				r.pos[j] = i
			}
		}
	}
	for _, c := range required {
		if r.pos[c] < 0 {
			r.missing = colNames[c]
			break
		}
	}
	return r
}

// errToasted: a column of an UPDATE's new tuple was not sent (unchanged
// TOAST); the row must be read from the table.
var errToasted = errors.New("unchanged TOAST column")

// decodedRow is a row as the source saw it.
type decodedRow struct {
	ev     outbox.Event
	status string
	bad    error // the row breaks the table contract: bury it with this reason
}

// decodeRow turns a tuple of the outbox table into an event. A value that
// cannot be read makes the row bad (buried with the reason), never an
// error, unless the id itself is unreadable (then the row cannot even be
// buried: errNoID).
func decodeRow(rel *relation, cols []*pglogrepl.TupleDataColumn) (decodedRow, error) {
	var d decodedRow
	get := func(c int) (string, bool, error) {
		p := rel.pos[c]
		if p < 0 || p >= len(cols) {
			return "", false, nil
		}
		switch cols[p].DataType {
		case pglogrepl.TupleDataTypeText:
			return string(cols[p].Data), true, nil
		case pglogrepl.TupleDataTypeToast:
			return "", false, errToasted
		default: // NULL (binary is never asked for)
			return "", false, nil
		}
	}
	idText, ok, err := get(colID)
	if err != nil {
		return d, err
	}
	id, perr := strconv.ParseInt(idText, 10, 64)
	if !ok || perr != nil {
		return d, fmt.Errorf("pgcdc: a row of the outbox table has no readable id (%q)", idText)
	}
	d.ev.ID = id
	bad := func(format string, args ...any) (decodedRow, error) {
		if d.bad == nil {
			d.bad = driver.BadRow(format, args...)
		}
		return d, nil
	}
	if rel.missing != "" {
		return bad("the table has no column %s, which the table contract requires: run `outbox migrate`", rel.missing)
	}
	text := func(c int) (string, error) {
		s, _, err := get(c)
		return s, err
	}
	var fields [numCols]string
	for c := colEventID; c < numCols; c++ {
		s, err := text(c)
		if err != nil {
			return d, err
		}
		fields[c] = s
	}
	d.status = fields[colStatus]
	if rel.pos[colStatus] < 0 {
		d.status = string(outbox.StatusNew)
	}
	m := &d.ev.Message
	m.EventID, m.Topic, m.Key, m.Type, m.AggregateType = fields[colEventID], fields[colTopic], fields[colKey], fields[colType], fields[colAggregateType]
	m.ContentType = fields[colContentType]
	if m.ContentType == "" {
		m.ContentType = outbox.DefaultContentType
	}
	if s := fields[colSchemaVersion]; s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			return bad("schema_version %q is not a number", s)
		}
		m.SchemaVersion = v
	}
	if s := fields[colAttempts]; s != "" {
		d.ev.Attempts, _ = strconv.Atoi(s)
	}
	payload, err := decodeBytea(fields[colPayload])
	if err != nil {
		return bad("payload: %v", err)
	}
	m.Payload = payload
	h, err := driver.DecodeHeaders([]byte(fields[colHeaders]))
	if err != nil {
		d.bad = err
		return d, nil
	}
	m.Headers = h
	d.ev.CreatedAt = parseTime(fields[colCreatedAt])
	if at := parseTime(fields[colNextAttemptAt]); !at.IsZero() && at.After(d.ev.CreatedAt) && d.ev.Attempts == 0 {
		m.AvailableAt = at
	}
	if err := driver.CheckRow(&d.ev); err != nil {
		d.bad = err
	}
	return d, nil
}

// decodeBytea reads bytea's text output (hex, which the replication
// connection asks for, or the old escape format).
func decodeBytea(s string) ([]byte, error) {
	if strings.HasPrefix(s, `\x`) {
		b, err := hex.DecodeString(s[2:])
		if err != nil {
			return nil, fmt.Errorf("bytea text is not hex: %w", err)
		}
		return b, nil
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			out = append(out, s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '\\' {
			out = append(out, '\\')
			i++
			continue
		}
		if i+4 > len(s) {
			return nil, errors.New("bytea escape is cut short")
		}
		v, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
		if err != nil {
			return nil, fmt.Errorf("bytea escape %q: %w", s[i:i+4], err)
		}
		out = append(out, byte(v))
		i += 3
	}
	return out, nil
}

// parseTime reads timestamptz's ISO text output (DateStyle ISO, which the
// replication connection asks for); zero when it cannot.
func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	for _, layout := range []string{"2006-01-02 15:04:05.999999999-07", "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999-07:00:00"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t
		}
	}
	return time.Time{}
}

// buriable makes an event storable in the dead-events table whatever it
// holds: a UUID event id, text without NUL or invalid UTF-8 and within the
// columns' 255 characters, a topic and a type.
func buriable(e outbox.Event) outbox.Event {
	if uuid.Validate(e.EventID) != nil {
		e.EventID = outbox.NewEventID()
	}
	e.Topic, e.Key, e.Type = clipText(e.Topic, 255), clipText(e.Key, 255), clipText(e.Type, 255)
	e.AggregateType, e.ContentType = clipText(e.AggregateType, 255), clipText(e.ContentType, 255)
	if e.Topic == "" {
		e.Topic = "-"
	}
	if e.Type == "" {
		e.Type = "-"
	}
	if e.ContentType == "" {
		e.ContentType = outbox.DefaultContentType
	}
	e.SchemaVersion = max(e.SchemaVersion, 0)
	if len(e.Headers) > 0 {
		h := make(map[string]string, len(e.Headers))
		for k, v := range e.Headers {
			if k = clipText(k, 255); k != "" {
				h[k] = clipText(v, 4000)
			}
		}
		e.Headers = h
	}
	if e.Payload == nil {
		e.Payload = []byte{}
	}
	return e
}

// clipText is s as PostgreSQL text can hold it (valid UTF-8, no NUL), at
// most n runes.
func clipText(s string, n int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

// isEventMessage reports whether a pgoutput record is a transactional
// logical message of the prefix.
func isEventMessage(data []byte, prefix string) bool {
	if len(data) == 0 || data[0] != byte(pglogrepl.MessageTypeMessage) {
		return false
	}
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return false
	}
	lm, ok := m.(*pglogrepl.LogicalDecodingMessage)
	return ok && lm.Transactional && lm.Prefix == prefix
}
