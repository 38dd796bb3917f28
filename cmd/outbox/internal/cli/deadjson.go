package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"unicode/utf8"

	"github.com/outbox-go/outbox/store"
)

// showJSON writes r as `dead show --json` does. A payload that the preview
// left out (r.Payload shorter than r.PayloadSize) is streamed from the
// store in pieces, twice: once to learn whether it is UTF-8 (a JSON string)
// or not (base64), once to write it, so a 100 MB payload costs the
// process a few MiB, not several copies of itself.
func showJSON(ctx context.Context, w io.Writer, st store.Store, r store.Record) error {
	if len(r.Payload) >= r.PayloadSize {
		return json.NewEncoder(w).Encode(toJSON([]store.Record{r})[0])
	}
	var check utf8Check
	if err := store.CopyPayload(ctx, st, r.ID, r.PayloadSize, &check); err != nil {
		return err
	}
	text := check.valid()
	size := r.PayloadSize
	r.Payload = nil
	j := toJSON([]store.Record{r})[0]
	j.PayloadSize, j.PayloadBase64 = size, !text
	head, err := json.Marshal(j)
	if err != nil {
		return err
	}
	// Every string value is escaped, so the field's own text appears once.
	const field = `,"payload":""`
	at := bytes.Index(head, []byte(field))
	if _, err := w.Write(append(head[:at:at], `,"payload":"`...)); err != nil {
		return err
	}
	var body io.WriteCloser = base64.NewEncoder(base64.StdEncoding, w)
	if text {
		body = &jsonString{w: w}
	}
	if err := store.CopyPayload(ctx, st, r.ID, size, body); err != nil {
		return err
	}
	if err := body.Close(); err != nil {
		return err
	}
	_, err = w.Write(append([]byte(`"`), append(head[at+len(field):], '\n')...))
	return err
}

// utf8Check learns whether the bytes written to it are UTF-8, carrying a
// character cut between two writes over to the next.
type utf8Check struct {
	bad   bool // an invalid sequence was seen
	carry []byte
}

func (c *utf8Check) Write(p []byte) (int, error) {
	if c.bad {
		return len(p), nil
	}
	b := append(c.carry, p...)
	cut := wholeRunes(b)
	c.bad = !utf8.Valid(b[:cut])
	c.carry = append(c.carry[:0], b[cut:]...)
	return len(p), nil
}

// valid reports whether everything written was UTF-8, ending on a whole
// character.
func (c *utf8Check) valid() bool { return !c.bad && len(c.carry) == 0 }

// wholeRunes is the length of b's longest prefix that does not end inside
// a character (an invalid byte counts as whole).
func wholeRunes(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:]) {
				return len(b)
			}
			return i
		}
	}
	return len(b)
}

// jsonString writes UTF-8 text as the inside of a JSON string, escaped as
// encoding/json escapes it, carrying a character cut between two writes
// over to the next.
type jsonString struct {
	w     io.Writer
	carry []byte
}

func (s *jsonString) Write(p []byte) (int, error) {
	b := append(s.carry, p...)
	cut := wholeRunes(b)
	if err := s.flush(b[:cut]); err != nil {
		return 0, err
	}
	s.carry = append(s.carry[:0], b[cut:]...)
	return len(p), nil
}

func (s *jsonString) flush(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	q, err := json.Marshal(string(b))
	if err != nil {
		return err
	}
	_, err = s.w.Write(q[1 : len(q)-1])
	return err
}

// Close writes what is carried.
func (s *jsonString) Close() error { return s.flush(s.carry) }
