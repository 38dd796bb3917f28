package binlog

import (
	"fmt"
	"strings"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/driver"
)

// The outbox table's columns the source reads, by the table contract
// (store/mysqlstore's schema).
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

// layout is where the contract's columns are in a row image (-1: absent).
type layout [numCols]int

// layoutOf maps column names (a table map's, or the table's definition in
// order) to the contract's columns; an error names a column the contract
// requires that is missing.
func layoutOf(names []string) (layout, error) {
	var l layout
	for i := range l {
		l[i] = -1
	}
	for i, n := range names {
		for c, want := range colNames {
			if strings.EqualFold(n, want) {
				l[c] = i
			}
		}
	}
	for c, p := range l {
		if p < 0 {
			return l, fmt.Errorf("the outbox table has no column %s, which the table contract requires: run `outbox migrate`", colNames[c])
		}
	}
	return l, nil
}

// decodedRow is a row of the outbox table as the source read it.
type decodedRow struct {
	ev     outbox.Event
	status string
	bad    error // the row breaks the table contract: it is buried with this reason
}

// rowOf reads a row image through l. A value of an unexpected type makes
// the row bad (buried), never an error; a row without a readable id is an
// error (it cannot even be buried).
func rowOf(l layout, img rowImage) (decodedRow, error) {
	var d decodedRow
	get := func(c int) any {
		if p := l[c]; p >= 0 && p < len(img) {
			return img[p]
		}
		return nil
	}
	id, ok := get(colID).(int64)
	if !ok {
		return d, fmt.Errorf("binlog: a row of the outbox table has no readable id (%T)", get(colID))
	}
	d.ev.ID = id
	var problem string
	text := func(c int) string {
		switch v := get(c).(type) {
		case []byte:
			return string(v)
		case nil:
			return ""
		default:
			if problem == "" {
				problem = fmt.Sprintf("%s holds a %T, not text", colNames[c], v)
			}
			return ""
		}
	}
	integer := func(c int) int {
		switch v := get(c).(type) {
		case int64:
			return int(v)
		case nil:
			return 0
		default:
			if problem == "" {
				problem = fmt.Sprintf("%s holds a %T, not an integer", colNames[c], v)
			}
			return 0
		}
	}
	when := func(c int) time.Time {
		t, _ := get(c).(time.Time)
		return t
	}
	var payload, headers []byte
	if b, ok := get(colPayload).([]byte); ok {
		payload = append(make([]byte, 0, len(b)), b...)
	}
	if b, ok := get(colHeaders).([]byte); ok {
		headers = b
	}
	f := rowFields{
		eventID: text(colEventID), topic: text(colTopic), key: text(colKey), typ: text(colType),
		aggregateType: text(colAggregateType), contentType: text(colContentType), status: text(colStatus),
		schemaVersion: integer(colSchemaVersion), attempts: integer(colAttempts),
		payload: payload, headers: headers, nextAttemptAt: when(colNextAttemptAt), createdAt: when(colCreatedAt),
	}
	d = f.row(id)
	if problem != "" && d.bad == nil {
		d.bad = driver.BadRow("%s", problem)
	}
	return d, nil
}

// rowFields are a row's values, as the stream or a read of the table
// gives them.
type rowFields struct {
	eventID, topic, key, typ, aggregateType, contentType, status string
	schemaVersion, attempts                                      int
	payload, headers                                             []byte
	nextAttemptAt, createdAt                                     time.Time
}

// row builds the event of row id, checking it against the table contract
// as the stores do.
func (f rowFields) row(id int64) decodedRow {
	d := decodedRow{status: f.status}
	d.ev.ID = id
	m := &d.ev.Message
	m.EventID, m.Topic, m.Key, m.Type, m.AggregateType = f.eventID, f.topic, f.key, f.typ, f.aggregateType
	m.ContentType = f.contentType
	if m.ContentType == "" {
		m.ContentType = outbox.DefaultContentType
	}
	m.SchemaVersion = f.schemaVersion
	m.Payload = f.payload
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	d.ev.Attempts = f.attempts
	d.ev.CreatedAt = f.createdAt
	if !f.nextAttemptAt.IsZero() && f.nextAttemptAt.After(f.createdAt) && f.attempts == 0 {
		m.AvailableAt = f.nextAttemptAt
	}
	h, err := driver.DecodeHeaders(f.headers)
	if err != nil {
		d.bad = err
		return d
	}
	m.Headers = h
	if err := driver.CheckRow(&d.ev); err != nil {
		d.bad = err
	}
	return d
}
