package binlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// events splits captured bytes into events (each says its size).
func events(t testing.TB, b []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(b) > 0 {
		if len(b) < headerLen {
			t.Fatalf("%d bytes left after the last event", len(b))
		}
		n := int(binary.LittleEndian.Uint32(b[9:]))
		if n < headerLen || n > len(b) {
			t.Fatalf("an event of %d bytes with %d left", n, len(b))
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// scenario reads (or, with -capture, first produces) testdata/<name>.bin
// and decodes every event of it.
func scenario(t *testing.T, name string) (*decoder, []event) {
	t.Helper()
	if *capture {
		captureScenario(t, name)
	}
	raw, err := os.ReadFile(filepath.Join("testdata", name+".bin"))
	if err != nil {
		t.Fatal(err)
	}
	d := newDecoder(true)
	var out []event
	for i, b := range events(t, raw) {
		ev, err := d.decode(b)
		if err != nil {
			t.Fatalf("%s: event %d: %v", name, i, err)
		}
		out = append(out, ev)
	}
	return d, out
}

// outboxRows decodes the rows of the capture table's rows events.
func outboxRows(t *testing.T, d *decoder, evs []event) []decodedRow {
	t.Helper()
	var out []decodedRow
	for _, ev := range evs {
		r, ok := ev.Body.(*rowsEv)
		if !ok || r.Kind == 'd' {
			continue
		}
		tm := d.tables[r.TableID]
		if tm == nil || tm.Table != captureTable {
			continue
		}
		l, err := layoutOf(tm.Names)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := rowsOf(tm, l, r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rows...)
	}
	return out
}

// The row-format writes of rows.sql: the inserts' values as written, the
// update that turns a DEAD row back to NEW delivered again, the one that
// made it DEAD and the delete not, the rolled-back insert absent.
func TestCapturedRows(t *testing.T) {
	d, evs := scenario(t, "rows")
	if _, ok := evs[0].Body.(rotate); !ok || evs[0].Flags&flagArtificial == 0 {
		t.Fatalf("the stream starts with %T (flags %#x); want the artificial rotate sent at connect", evs[0].Body, evs[0].Flags)
	}
	if fd, ok := evs[1].Body.(*formatDesc); !ok || !fd.Checksum || !strings.Contains(fd.Version, "MariaDB") {
		t.Fatalf("then %+v; want a MariaDB format description with CRC32", evs[1].Body)
	}
	var maps, xids, gtids int
	for _, ev := range evs {
		switch b := ev.Body.(type) {
		case *tableMapEvent:
			maps++
			if b.Table == captureTable && (len(b.Names) != len(b.Types) || b.Names[1] != "event_id") {
				t.Fatalf("the table map's column names: %q", b.Names)
			}
		case xid:
			xids++
		case mariaGTID:
			gtids++
			if b.Standalone {
				t.Fatal("a transaction's GTID event is flagged standalone")
			}
		}
	}
	if maps == 0 || xids != 4 || gtids != 4 {
		t.Fatalf("%d table maps, %d XIDs, %d GTIDs; want the 4 transactions of rows.sql", maps, xids, gtids)
	}
	rows := outboxRows(t, d, evs)
	if len(rows) != 3 {
		t.Fatalf("%d rows to deliver; want the 2 inserted and the 1 requeued", len(rows))
	}
	a, b, again := rows[0], rows[1], rows[2]
	for _, r := range rows {
		if r.bad != nil {
			t.Fatalf("row %d: %v", r.ev.ID, r.bad)
		}
	}
	m := a.ev.Message
	if m.EventID != "0b6f3c4e-8a61-4a9e-9d2f-2f1c6c1f0a01" || m.Topic != "orders" || m.Key != "order-1" || m.Type != "OrderPlaced" ||
		m.AggregateType != "order" || m.SchemaVersion != 2 || !bytes.Equal(m.Payload, []byte("{\"id\":1}\x00\xff")) || m.ContentType != "application/json" ||
		m.Headers["traceparent"] != "00-abc-def-01" || m.Headers["tenant"] != "acme" || len(m.Headers) != 2 {
		t.Fatalf("the first insert decoded as %+v", m)
	}
	if want := time.Date(2026, 12, 3, 8, 30, 1, 123456000, time.UTC); !a.ev.CreatedAt.Equal(want) || !m.AvailableAt.IsZero() {
		t.Fatalf("created_at %v, available %v; want %v and none", a.ev.CreatedAt, m.AvailableAt, want)
	}
	if want := time.Date(2026, 12, 3, 8, 31, 0, 500000000, time.UTC); !b.ev.AvailableAt.Equal(want) || b.ev.Key != "" || len(b.ev.Payload) != 0 {
		t.Fatalf("the second insert: available %v, key %q, payload %q; want %v, no key, empty payload", b.ev.AvailableAt, b.ev.Key, b.ev.Payload, want)
	}
	if again.ev.EventID != b.ev.EventID || again.status != "NEW" {
		t.Fatalf("the requeued row: %s %s; want %s NEW", again.ev.EventID, again.status, b.ev.EventID)
	}
	raw, _ := os.ReadFile(filepath.Join("testdata", "rows.bin"))
	if bytes.Contains(raw, []byte("0b6f3c4e-8a61-4a9e-9d2f-2f1c6c1f0a03")) {
		t.Fatal("the rolled-back insert is in the binlog")
	}
}

// statement.sql: a statement-format INSERT, an ALTER, and FLUSH BINARY
// LOGS, as a stream sees them.
func TestCapturedStatements(t *testing.T) {
	d, evs := scenario(t, "statement")
	s := &Source{cfg: Config{Table: captureTable}, n: names{schema: "test"}}
	var insert, alter bool
	var rotates []rotate
	var lists int
	for _, ev := range evs {
		switch b := ev.Body.(type) {
		case query:
			why := s.touches(b.Schema, b.Text)
			switch {
			case strings.HasPrefix(b.Text, "INSERT"):
				insert = strings.Contains(why, "statement-format write")
			case strings.HasPrefix(b.Text, "ALTER"):
				alter = strings.Contains(why, "definition changed")
			}
		case rotate:
			rotates = append(rotates, b)
		case gtidList:
			lists++
		}
	}
	if !insert || !alter {
		t.Fatalf("the statement-format INSERT seen as untrusted: %v; the ALTER: %v", insert, alter)
	}
	if len(rotates) != 3 || rotates[1].Pos != 4 || rotates[1].File <= rotates[0].File {
		t.Fatalf("rotates %+v; want the one at connect, the real one of FLUSH BINARY LOGS to a new file at 4, and its artificial repeat", rotates)
	}
	if lists != 1 {
		t.Fatalf("%d GTID lists; want the new file's", lists)
	}
	rows := outboxRows(t, d, evs)
	if len(rows) != 2 || rows[0].ev.Type != "AfterAlter" || rows[1].ev.Type != "AfterFlush" {
		t.Fatalf("rows %d; want the two row-format inserts, mapped by name after the ALTER", len(rows))
	}
}

// compressed.sql: MariaDB's zlib-compressed rows and query events.
func TestCapturedCompressed(t *testing.T) {
	d, evs := scenario(t, "compressed")
	var types []byte
	var text string
	for _, ev := range evs {
		types = append(types, ev.Type)
		if q, ok := ev.Body.(query); ok && ev.Type == evQueryCompressed {
			text = q.Text
		}
	}
	if !bytes.Contains(types, []byte{evWriteRowsCompV1}) || !strings.Contains(text, "CompressedStatement") {
		t.Fatalf("event types %v, compressed query %q; want a compressed rows event and the compressed INSERT's text", types, text)
	}
	rows := outboxRows(t, d, evs)
	if len(rows) != 1 || string(rows[0].ev.Payload) != strings.Repeat("compressible payload ", 40) {
		t.Fatalf("%d rows; want the compressed one with its payload", len(rows))
	}
}

// reseal sets an event's size and recomputes its CRC32.
func reseal(b []byte) []byte {
	binary.LittleEndian.PutUint32(b[9:], uint32(len(b)))
	binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.ChecksumIEEE(b[:len(b)-4]))
	return b
}

// A corrupt event is refused by its checksum; a truncated one (at any
// length) is an error, never a panic; MySQL's zstd transaction payload is
// refused naming the setting; a v2 rows event (MySQL) decodes as v1 does.
func TestDecodeRefusals(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "rows.bin"))
	if err != nil {
		t.Fatal(err)
	}
	evs := events(t, raw)
	var rowsAt int
	for i, b := range evs {
		if b[4] == evWriteRowsV1 {
			rowsAt = i
			break
		}
	}
	d := newDecoder(true)
	for _, b := range evs[:rowsAt] {
		if _, err := d.decode(b); err != nil {
			t.Fatal(err)
		}
	}
	flipped := append([]byte{}, evs[rowsAt]...)
	flipped[40] ^= 1
	if _, err := d.decode(flipped); err == nil || !strings.Contains(err.Error(), "CRC32") {
		t.Fatalf("a flipped bit: %v; want a CRC32 error", err)
	}
	for _, b := range evs {
		for n := 0; n < len(b); n++ {
			cut := append([]byte{}, b[:n]...)
			if n >= headerLen {
				cut = reseal(append(cut, 0, 0, 0, 0)[:n])
			}
			_, _ = newDecoder(true).decode(cut)
			_, _ = d.decode(cut) // may take a cut format description as its own
		}
	}
	zstd := reseal(append(append([]byte{}, evs[rowsAt][:headerLen]...), 1, 2, 3, 4, 0, 0, 0, 0))
	zstd[4] = evTransactionPayload
	if _, err := d.decode(reseal(zstd)); !errors.Is(err, errZstdPayload) {
		t.Fatalf("a transaction payload event: %v; want errZstdPayload", err)
	}
	d = newDecoder(true)
	for _, b := range evs[:rowsAt] {
		if _, err := d.decode(b); err != nil {
			t.Fatal(err)
		}
	}
	v1 := evs[rowsAt]
	v2 := append(append(append([]byte{}, v1[:headerLen+8]...), 2, 0), v1[headerLen+8:]...)
	v2[4] = evWriteRowsV2
	ev, err := d.decode(reseal(v2))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := d.decode(v1)
	if r := ev.Body.(*rowsEv); !bytes.Equal(r.Data, want.Body.(*rowsEv).Data) || r.Kind != 'w' {
		t.Fatal("a v2 write rows event decodes unlike its v1 twin")
	}
}

// FuzzDecode decodes a stream of events (as the captures hold them) and the
// outbox rows in it: any input gives values or errors, never a panic.
func FuzzDecode(f *testing.F) {
	for _, name := range []string{"rows", "statement", "compressed"} {
		raw, err := os.ReadFile(filepath.Join("testdata", name+".bin"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, checksum := range []bool{false, true} {
			d := newDecoder(checksum)
			rest := b
			for len(rest) >= headerLen {
				n := int(binary.LittleEndian.Uint32(rest[9:]))
				if n < headerLen || n > len(rest) {
					n = len(rest)
				}
				ev, err := d.decode(rest[:n])
				rest = rest[n:]
				if err != nil {
					continue
				}
				if r, ok := ev.Body.(*rowsEv); ok {
					if tm := d.tables[r.TableID]; tm != nil {
						l, err := layoutOf(tm.Names)
						if err == nil {
							_, _ = rowsOf(tm, l, r)
						}
						_, _ = decodeRows(tm, r)
					}
				}
			}
		}
	})
}
