package redact

import (
	"net/url"
	"slices"
	"strings"
)

// Mask is what a secret is replaced with.
const Mask = "xxxxx"

// URL returns the connection string raw with its secrets masked. raw may
// be a URL or a comma-separated list of URLs, a keyword/value DSN
// (host=… password=…), a go-sql-driver/mysql DSN or a file path; what holds
// no secret comes back unchanged.
func URL(raw string) string {
	return apply(raw, connSpans(raw))
}

// Secrets returns the secret values of the connection string raw, each as
// written and, where it differs, percent- or backslash-decoded.
func Secrets(raw string) []string {
	var out []string
	add := func(v string) {
		if v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	for _, sp := range connSpans(raw) {
		v := raw[sp.start:sp.end]
		add(v)
		add(sp.enc.decode(v))
	}
	return out
}

// Userinfo returns the userinfo of the URL raw as written (the text before
// the '@' that ends it, by the rule of the package doc), and whether raw
// is a URL with one. Callers compare it with their driver's reading to
// refuse a URL whose password the driver would split elsewhere.
func Userinfo(raw string) (string, bool) {
	loc := schemeStart.FindStringIndex(raw)
	if loc == nil || loc[0] != 0 {
		return "", false
	}
	rest := raw[loc[1]:]
	at := userinfoEnd(rest)
	if at < 0 {
		return "", false
	}
	return rest[:at], true
}

// Text returns msg with every secret masked: those in the URLs, name=value
// pairs and MySQL DSNs it contains, and those of the connection strings
// raws where they stand as a whole value in a userinfo or name=value
// position. A message without secrets comes back unchanged.
func Text(msg string, raws ...string) string {
	spans := textSpans(msg)
	var known []string
	for _, raw := range raws {
		known = append(known, Secrets(raw)...)
	}
	spans = append(spans, knownSpans(msg, known)...)
	return apply(msg, spans)
}

// Error returns err with its message passed through [Text]; it unwraps to
// err, so errors.Is and errors.As see through it. It returns err itself
// when the message holds no secret, and nil for nil.
func Error(err error, raws ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if red := Text(msg, raws...); red != msg {
		return &redactedError{msg: red, err: err}
	}
	return err
}

// redactedError shows a redacted message and keeps the original for
// classification.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// span is the byte range [start, end) of a secret, and how its value is
// encoded there.
type span struct {
	start, end int
	enc        encoding
}

// encoding says how a secret's text decodes to the value a driver uses.
type encoding uint8

const (
	asWritten    encoding = iota // MySQL DSN password, text found in a message
	percentPath                  // URL userinfo
	percentQuery                 // URL query value ('+' is a space)
	backslashed                  // libpq keyword value
)

// decode returns the value the text v of a secret encoded by e stands for.
func (e encoding) decode(v string) string {
	var err error
	d := v
	switch e {
	case percentPath:
		d, err = url.PathUnescape(v)
	case percentQuery:
		d, err = url.QueryUnescape(v)
	case backslashed:
		d = unbackslash(v)
	}
	if err != nil {
		return v
	}
	return d
}

// apply replaces each span of s with Mask, merging overlaps.
func apply(s string, spans []span) string {
	if len(spans) == 0 {
		return s
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	for i := 0; i < len(spans); {
		cur := spans[i]
		for i++; i < len(spans) && spans[i].start < cur.end; i++ {
			cur.end = max(cur.end, spans[i].end)
		}
		b.WriteString(s[last:cur.start])
		b.WriteString(Mask)
		last = cur.end
	}
	b.WriteString(s[last:])
	return b.String()
}

// unbackslash undoes libpq-style backslash escapes (\' \\ \ ).
func unbackslash(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
