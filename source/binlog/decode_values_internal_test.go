package binlog

import (
	"encoding/binary"
	"testing"
	"time"
)

// MySQL's binary JSON (the servers here store JSON as text, so by hand,
// from the format): an object with an inline integer and literal and an
// offset string, an array, and cut documents refused.
func TestJSONText(t *testing.T) {
	object := []byte{3, 0, 31, 0, // count, size
		25, 0, 1, 0, 26, 0, 1, 0, 27, 0, 1, 0, // keys: offset, length
		jsonString, 28, 0, jsonInt16, 5, 0, jsonLiteral, 1, 0, // values
		'a', 'n', 't', 2, 'b', 'c'}
	got, err := jsonText(append([]byte{jsonSmallObject}, object...))
	if err != nil || string(got) != `{"a":"bc","n":5,"t":true}` {
		t.Fatalf("object: %s, %v", got, err)
	}
	array := []byte{2, 0, 12, 0, jsonInt16, 1, 0, jsonString, 10, 0, 1, 'x'}
	got, err = jsonText(append([]byte{jsonSmallArray}, array...))
	if err != nil || string(got) != `[1,"x"]` {
		t.Fatalf("array: %s, %v", got, err)
	}
	for n := 1; n < len(object); n++ {
		if got, err := jsonText(append([]byte{jsonSmallObject}, object[:n]...)); err == nil {
			t.Fatalf("an object cut to %d bytes decoded as %s", n, got)
		}
	}
	if got, _ := jsonText(nil); string(got) != "null" {
		t.Fatalf("an empty document: %s; want null", got)
	}
}

// TIMESTAMP2 and DATETIME2 with their fractions, as MySQL 5.6+ and MariaDB
// 10.3+ store them.
func TestTemporal(t *testing.T) {
	sec := uint32(time.Date(2026, 12, 3, 8, 30, 1, 0, time.UTC).Unix())
	for _, c := range []struct {
		fsp  uint16
		frac []byte
		us   int
	}{{0, nil, 0}, {1, []byte{12}, 120000}, {3, []byte{0x04, 0xd2}, 123400}, {6, []byte{0x01, 0xe2, 0x40}, 123456}} {
		b := binary.BigEndian.AppendUint32(nil, sec)
		r := reader{b: append(b, c.frac...)}
		v, err := readValue(&r, typeTimestamp2, c.fsp)
		want := time.Unix(int64(sec), int64(c.us)*1000).UTC()
		if err != nil || !v.(time.Time).Equal(want) || len(r.b) != 0 {
			t.Fatalf("TIMESTAMP(%d): %v, %v; want %v", c.fsp, v, err, want)
		}
	}
	ym := uint64(2026*13 + 12)
	packed := ym<<22 | 3<<17 | 8<<12 | 30<<6 | 1 + 0x8000000000
	b := []byte{byte(packed >> 32), byte(packed >> 24), byte(packed >> 16), byte(packed >> 8), byte(packed), 0x01, 0xe2, 0x40}
	r := reader{b: b}
	v, err := readValue(&r, typeDatetime2, 6)
	if want := time.Date(2026, 12, 3, 8, 30, 1, 123456000, time.UTC); err != nil || !v.(time.Time).Equal(want) {
		t.Fatalf("DATETIME(6): %v, %v; want %v", v, err, want)
	}
}
