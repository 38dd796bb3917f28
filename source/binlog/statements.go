package binlog

import (
	"strings"
)

// touches reports why a statement logged as text (a query event) makes
// the log untrustworthy for the outbox table, or "" when it does not name
// the table: a write to it (the session's binlog_format was STATEMENT or
// MIXED, so its rows are not in the log) or a change of its definition.
// schema is the statement's default database.
func (s *Source) touches(schema, text string) string {
	toks := tokens(text)
	named := false
	for i, t := range toks {
		if !strings.EqualFold(t, s.cfg.Table) {
			continue
		}
		db := schema
		if i >= 2 && toks[i-1] == "." {
			db = toks[i-2]
		}
		if strings.EqualFold(db, s.n.schema) {
			named = true
			break
		}
	}
	if !named {
		return ""
	}
	short := text
	if len(short) > 120 {
		short = short[:120] + "…"
	}
	first := ""
	if len(toks) > 0 {
		first = strings.ToUpper(toks[0])
	}
	switch first {
	case "INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD", "WITH", "CALL":
		return "a statement-format write to the outbox table (the session's binlog_format was STATEMENT or MIXED, so its rows are not in the log): " + short
	case "SAVEPOINT", "RELEASE", "XA", "SET", "SELECT", "DO":
		return ""
	}
	return "the outbox table's definition changed: " + short
}

// tokens splits SQL into identifiers, keywords and the dots between
// qualified names, skipping string literals and comments.
func tokens(q string) []string {
	var out []string
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '\'' || c == '"':
			i = skipQuoted(q, i, c)
		case c == '`':
			j := i + 1
			var b strings.Builder
			for j < len(q) {
				if q[j] == '`' {
					if j+1 < len(q) && q[j+1] == '`' {
						b.WriteByte('`')
						j += 2
						continue
					}
					break
				}
				b.WriteByte(q[j])
				j++
			}
			out = append(out, b.String())
			i = j + 1
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			end := strings.Index(q[i+2:], "*/")
			if end < 0 {
				return out
			}
			i += end + 4
		case c == '#' || c == '-' && i+1 < len(q) && q[i+1] == '-':
			end := strings.IndexByte(q[i:], '\n')
			if end < 0 {
				return out
			}
			i += end + 1
		case c == '.':
			out = append(out, ".")
			i++
		case isIdent(c):
			j := i
			for j < len(q) && isIdent(q[j]) {
				j++
			}
			out = append(out, q[i:j])
			i = j
		default:
			i++
		}
	}
	return out
}

func skipQuoted(q string, i int, quote byte) int {
	for j := i + 1; j < len(q); j++ {
		switch q[j] {
		case '\\':
			j++
		case quote:
			if j+1 < len(q) && q[j+1] == quote {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(q)
}

func isIdent(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}
