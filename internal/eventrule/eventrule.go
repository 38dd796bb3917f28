// Package eventrule holds the rules an event's text and headers must follow
// to be a valid CloudEvent with user headers on every transport, in one
// place that both outbox.Validate (at enqueue) and the broker adapters (at
// publish, for rows written by plain SQL) apply. It depends on nothing of
// the module, so the root package and package broker can both import it.
package eventrule

import (
	"strings"
	"unicode/utf8"
)

// TextProblem says what is wrong with a string attribute.
type TextProblem uint8

// The outcomes of CheckText.
const (
	TextOK           TextProblem = iota
	TextInvalidUTF8              // not valid UTF-8
	TextControl                  // a control character, U+0000–U+001F or U+007F–U+009F
	TextNoncharacter             // a Unicode noncharacter (U+FDD0–U+FDEF, U+xFFFE, U+xFFFF)
)

// CheckText reports the first character of s that a CloudEvents String may
// not hold, and its byte offset. CloudEvents excludes the control
// characters U+0000–U+001F and U+007F–U+009F and the Unicode
// noncharacters; surrogates cannot occur in valid UTF-8. One pass over the
// bytes, with a fast path for ASCII.
func CheckText(s string) (TextProblem, rune, int) {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return TextControl, rune(c), i
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return TextInvalidUTF8, utf8.RuneError, i
		case r <= 0x9f:
			return TextControl, r, i
		case r >= 0xfdd0 && (r <= 0xfdef || r&0xfffe == 0xfffe):
			return TextNoncharacter, r, i
		}
		i += size
	}
	return TextOK, 0, -1
}

// MaxHeaderName is the longest header name, in bytes.
const MaxHeaderName = 255

// tchar marks the bytes of an HTTP token (RFC 9110 §5.6.2): printable
// ASCII except the separators "(),/:;<=>?@[\]{} and the double quote. It is
// also exactly what nats.go accepts in a header name (ADR-4, slightly
// stricter); Kafka and AMQP accept more, so a token passes everywhere.
var tchar = func() (t [256]bool) {
	for c := 0x21; c < 0x7f; c++ {
		t[c] = !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, rune(c))
	}
	return t
}()

// CheckHeaderName returns why name cannot be a header name on every
// transport, or "" when it can.
func CheckHeaderName(name string) string {
	if name == "" {
		return "header names must not be empty"
	}
	if len(name) > MaxHeaderName {
		return "header names are at most 255 bytes"
	}
	for i := 0; i < len(name); i++ {
		if !tchar[name[i]] {
			return `header names are HTTP tokens: ASCII letters, digits and !#$%&'*+-.^_` + "`" + `|~ only (no spaces, colons, slashes or non-ASCII); NATS and HTTP refuse anything else`
		}
	}
	return ""
}

// CheckHeaderValue returns why v cannot be a header value that every
// transport delivers unchanged, or "" when it can.
func CheckHeaderValue(v string) string {
	switch p, _, _ := CheckText(v); p {
	case TextInvalidUTF8:
		return "header values must be valid UTF-8; base64-encode binary values"
	case TextControl, TextNoncharacter:
		return "header values must not contain control characters (U+0000–U+001F, U+007F–U+009F, including TAB, CR and LF) or Unicode noncharacters"
	}
	if v != "" && (v[0] == ' ' || v[len(v)-1] == ' ') {
		return "header values must not start or end with a space: NATS and HTTP trim them, so the value would not arrive as written"
	}
	return ""
}
