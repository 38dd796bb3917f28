package cli

import (
	"bytes"
	"encoding/json"
	"testing"
)

// A payload streamed in pieces is escaped exactly as encoding/json escapes
// it whole, and judged UTF-8 or not alike, wherever a piece ends: in the
// middle of a character included.
func TestStreamedJSONStringMatchesWhole(t *testing.T) {
	text := []byte("héllo \x00\x1b[31m <&> \"q\" \\ 日本語 🙂 end")
	bad := append(append([]byte("ok é"), 0xff, 0xfe), []byte("日")...)
	for _, p := range [][]byte{text, bad} {
		whole, _ := json.Marshal(string(p))
		for a := 0; a <= len(p); a++ {
			for b := a; b <= len(p); b++ {
				var out bytes.Buffer
				s := &jsonString{w: &out}
				var c utf8Check
				for _, piece := range [][]byte{p[:a], p[a:b], p[b:]} {
					_, _ = s.Write(piece)
					_, _ = c.Write(piece)
				}
				_ = s.Close()
				valid := c.valid()
				if valid != bytes.Equal(p, text) {
					t.Fatalf("pieces at %d, %d of %q: UTF-8 %v", a, b, p, valid)
				}
				if valid && out.String() != string(whole[1:len(whole)-1]) {
					t.Fatalf("pieces at %d, %d: %s, want %s", a, b, out.String(), whole)
				}
			}
		}
	}
}
