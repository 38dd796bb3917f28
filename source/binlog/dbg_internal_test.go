package binlog

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestCaptured(t *testing.T) {
	for _, name := range []string{"rows", "statement", "compressed"} {
		if *capture {
			captureScenario(t, name)
		}
		raw, err := os.ReadFile(filepath.Join("testdata", name+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		d := newDecoder(true)
		for len(raw) >= 19 {
			n := int(uint32(raw[9]) | uint32(raw[10])<<8 | uint32(raw[11])<<16 | uint32(raw[12])<<24)
			ev, err := d.decode(raw[:n])
			raw = raw[n:]
			fmt.Printf("%s: type %d pos %d flags %#x err %v body %+v\n", name, ev.Type, ev.LogPos, ev.Flags, err, ev.Body)
			if r, ok := ev.Body.(*rowsEv); ok && err == nil {
				rows, err := decodeRows(d.tables[r.TableID], r)
				fmt.Printf("   rows %q %v\n", rows, err)
			}
		}
	}
}
