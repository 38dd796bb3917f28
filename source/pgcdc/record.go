package pgcdc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/driver"
)

// The table-less mode's record (the content of its logical messages),
// format version 1, binary and length-prefixed (decoding it costs a
// fraction of JSON with a base64 payload, which the source must do for
// every event):
//
//	byte     version (1)
//	16 bytes event id (UUID)
//	string   topic, event_key, event_type, aggregate_type, content_type
//	uvarint  schema_version
//	varint   available_at, Unix microseconds (0: none)
//	uvarint  number of headers, then each: string name, string value
//	string   payload (the rest of the record)
//
// A string is a uvarint length and that many bytes. A reader refuses a
// version it does not know (the event is buried, saying to upgrade the
// relay) rather than guessing.

// encodeMessage builds the record of a normalized message.
func encodeMessage(m outbox.Message) ([]byte, error) {
	id, err := uuid.Parse(m.EventID)
	if err != nil {
		return nil, fmt.Errorf("pgcdc: event id %q is not a UUID", m.EventID)
	}
	n := 1 + 16 + 6*binary.MaxVarintLen64 + len(m.Topic) + len(m.Key) + len(m.Type) + len(m.AggregateType) + len(m.ContentType) + 3*binary.MaxVarintLen64 + len(m.Payload)
	for k, v := range m.Headers {
		n += 2*binary.MaxVarintLen64 + len(k) + len(v)
	}
	b := make([]byte, 0, n)
	b = append(b, messageFormatVersion)
	b = append(b, id[:]...)
	for _, s := range []string{m.Topic, m.Key, m.Type, m.AggregateType, m.ContentType} {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, uint64(max(m.SchemaVersion, 0)))
	var at int64
	if !m.AvailableAt.IsZero() {
		at = m.AvailableAt.UnixMicro()
	}
	b = binary.AppendVarint(b, at)
	b = binary.AppendUvarint(b, uint64(len(m.Headers)))
	for k, v := range m.Headers {
		b = appendString(b, k)
		b = appendString(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(m.Payload)))
	return append(b, m.Payload...), nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errShort = errors.New("the record is cut short")

// recordReader reads a record's fields, remembering the first error.
type recordReader struct {
	b   []byte
	err error
}

func (r *recordReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recordReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recordReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errShort
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

func (r *recordReader) string() string { return string(r.bytes()) }

// decodeMessage turns a logical message's content into an event. A record
// it cannot read is returned with bad set and what could be read (it is
// buried with the raw content as its payload). content may be the
// connection's buffer: nothing of it is kept.
func decodeMessage(lsn pglogrepl.LSN, content []byte, commitTime time.Time) decodedRow {
	d := decodedRow{status: string(outbox.StatusNew)}
	d.ev.ID = int64(lsn)
	d.ev.CreatedAt = commitTime
	raw := func(why string) decodedRow {
		d.ev.Message = outbox.Message{Payload: append([]byte{}, content...), ContentType: "application/octet-stream", SchemaVersion: 1}
		d.ev = buriable(d.ev)
		d.bad = driver.BadRow("the logical message at %s is not an outbox record (%s); its raw content is the payload", lsn, why)
		return d
	}
	if len(content) == 0 {
		return raw("it is empty")
	}
	if v := content[0]; v != messageFormatVersion {
		if v > messageFormatVersion && v < 32 {
			d = raw(fmt.Sprintf("format version %d", v))
			d.bad = driver.BadRow("the logical message at %s has record format version %d; this relay reads version %d: upgrade the relay", lsn, v, messageFormatVersion)
			return d
		}
		return raw(fmt.Sprintf("it starts with byte %#x, not a format version", v))
	}
	if len(content) < 17 {
		return raw(errShort.Error())
	}
	var id uuid.UUID
	copy(id[:], content[1:17])
	r := recordReader{b: content[17:]}
	m := &d.ev.Message
	m.EventID = id.String()
	m.Topic, m.Key, m.Type, m.AggregateType, m.ContentType = r.string(), r.string(), r.string(), r.string(), r.string()
	sv := r.uvarint()
	at := r.varint()
	nh := r.uvarint()
	if r.err == nil && nh > uint64(len(r.b)) {
		r.err = errShort
	}
	if r.err == nil && nh > 0 {
		m.Headers = make(map[string]string, nh)
		for i := uint64(0); i < nh && r.err == nil; i++ {
			k := r.string()
			m.Headers[k] = r.string()
		}
	}
	payload := r.bytes()
	if r.err == nil && len(r.b) != 0 {
		r.err = errors.New("bytes follow the payload")
	}
	if r.err == nil && sv > 1<<31-1 {
		r.err = fmt.Errorf("schema_version %d is out of range", sv)
	}
	if r.err != nil {
		return raw(r.err.Error())
	}
	m.Payload = append(make([]byte, 0, len(payload)), payload...)
	m.SchemaVersion = int(sv)
	if at != 0 {
		m.AvailableAt = time.UnixMicro(at)
	}
	if m.ContentType == "" {
		m.ContentType = outbox.DefaultContentType
	}
	if err := driver.CheckRow(&d.ev); err != nil {
		d.bad = err
		d.ev = buriable(d.ev)
	}
	return d
}
