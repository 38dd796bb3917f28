package pgcdc

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/jackc/pglogrepl"

	outbox "github.com/outbox-go/outbox"
)

func TestMessageRoundTrip(t *testing.T) {
	m := outbox.Message{EventID: outbox.NewEventID(), Topic: "t", Key: "k", Type: "T", AggregateType: "A", SchemaVersion: 2,
		Payload: []byte{0, 1, 0xff}, ContentType: "application/octet-stream", Headers: map[string]string{"a": "b"},
		AvailableAt: time.UnixMicro(time.Now().Add(time.Hour).UnixMicro())}
	rec, err := encodeMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	d := decodeMessage(42, rec, time.Now())
	if d.bad != nil {
		t.Fatal(d.bad)
	}
	got := d.ev.Message
	if got.EventID != m.EventID || got.Topic != m.Topic || got.Key != m.Key || got.Type != m.Type || got.AggregateType != m.AggregateType ||
		got.SchemaVersion != 2 || !bytes.Equal(got.Payload, m.Payload) || got.ContentType != m.ContentType || got.Headers["a"] != "b" ||
		!got.AvailableAt.Equal(m.AvailableAt) || d.ev.ID != 42 {
		t.Fatalf("round trip: %+v", got)
	}
	newer := append([]byte{2}, rec[1:]...)
	if d := decodeMessage(1, newer, time.Now()); d.bad == nil || !strings.Contains(d.bad.Error(), "upgrade the relay") {
		t.Fatalf("a newer format version: %v", d.bad)
	}
	if d := decodeMessage(1, []byte(`not a record`), time.Now()); d.bad == nil || string(d.ev.Payload) != "not a record" || d.ev.Topic == "" {
		t.Fatalf("garbage: %+v", d)
	}
	for i := 1; i < len(rec); i++ { // every truncation is refused
		if d := decodeMessage(1, rec[:i], time.Now()); d.bad == nil {
			t.Fatalf("a record cut at %d of %d bytes was accepted", i, len(rec))
		}
	}
}

func TestDecodeBytea(t *testing.T) {
	for in, want := range map[string]string{`\x00ff41`: "\x00\xffA", `abc`: "abc", `a\\b`: `a\b`, `\101\000`: "A\x00"} {
		got, err := decodeBytea(in)
		if err != nil || string(got) != want {
			t.Errorf("decodeBytea(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{`\xzz`, `\1`, `\999`} {
		if _, err := decodeBytea(in); err == nil {
			t.Errorf("decodeBytea(%q) accepted", in)
		}
	}
}

// FuzzDecodeMessage: any content decodes to an event or a buried one, never
// a panic, and a buried one still has what burying needs.
func FuzzDecodeMessage(f *testing.F) {
	rec, _ := encodeMessage(outbox.Message{EventID: outbox.NewEventID(), Topic: "t", Type: "T"}.Normalized())
	f.Add(rec)
	f.Add([]byte{1})
	f.Add([]byte(`{"v":1,"id":"x","topic":"\u0000","type":"T","headers":{"a":1}}`))
	bad, _ := encodeMessage(outbox.Message{EventID: outbox.NewEventID(), Topic: "t\x00\xff", Type: "", Headers: map[string]string{"": "x"}})
	f.Add(bad)
	f.Fuzz(func(t *testing.T, content []byte) {
		d := decodeMessage(pglogrepl.LSN(7), content, time.Now())
		if d.bad == nil {
			return
		}
		e := d.ev
		if e.Topic == "" || e.Type == "" || uuid.Validate(e.EventID) != nil || strings.ContainsRune(e.Topic+e.Key+e.Type, 0) ||
			!utf8.ValidString(e.Topic+e.Key+e.Type+e.AggregateType+e.ContentType) || utf8.RuneCountInString(e.Topic) > 255 {
			t.Fatalf("a buried event the buried table cannot hold: %+v", e)
		}
	})
}

// FuzzDecodeRow: any tuple decodes to an event, a buried row, or an error
// naming the unreadable id; never a panic.
func FuzzDecodeRow(f *testing.F) {
	f.Add("1", "t", "k", `\x41`, `{}`, "2026-12-01 12:00:00.5+00")
	f.Add("x", "", "", `\xz`, `[]`, "yesterday")
	f.Fuzz(func(t *testing.T, id, topic, key, payload, headers, created string) {
		vals := [numCols]string{colID: id, colEventID: "0190c5d2-0000-7000-8000-000000000000", colTopic: topic, colKey: key,
			colType: "T", colPayload: payload, colHeaders: headers, colStatus: "NEW", colCreatedAt: created}
		cols := make([]*pglogrepl.TupleDataColumn, numCols)
		for i, v := range vals {
			cols[i] = &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(v)}
		}
		d, err := decodeRow(identity, cols)
		if err == nil && d.bad == nil && d.ev.Topic == "" {
			t.Fatal("a row without a topic was accepted")
		}
	})
}

func BenchmarkDecodeMessage(b *testing.B) {
	rec, _ := encodeMessage(outbox.Message{EventID: outbox.NewEventID(), Topic: "orders", Key: "order-42", Type: "OrderPaid",
		Payload: bytes.Repeat([]byte("x"), 200)}.Normalized())
	b.ReportAllocs()
	for b.Loop() {
		if d := decodeMessage(1, rec, time.Time{}); d.bad != nil {
			b.Fatal(d.bad)
		}
	}
}

func BenchmarkDecodeRow(b *testing.B) {
	vals := [numCols]string{"123", "0190c5d2-0000-7000-8000-000000000000", "orders", "order-42", "OrderPaid", "", "1",
		`\x` + strings.Repeat("78", 200), "application/json", "{}", "NEW", "0", "2026-12-01 12:00:00.5+00", "2026-12-01 12:00:00.5+00"}
	cols := make([]*pglogrepl.TupleDataColumn, numCols)
	for i, v := range vals {
		cols[i] = &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(v)}
	}
	b.ReportAllocs()
	for b.Loop() {
		if d, err := decodeRow(identity, cols); err != nil || d.bad != nil {
			b.Fatal(err, d.bad)
		}
	}
}
