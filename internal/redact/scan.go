package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// This file finds where the secrets are: it returns byte ranges and never
// edits text, so that everything outside a range stays as it was.

var (
	// schemeStart finds where a URL begins.
	schemeStart = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.\-]*://`)
	// nameEquals finds a name=value pair's name and its '='.
	nameEquals = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_.\-]*([ \t]*)=`)
	// mysqlAt finds the '@' between a go-sql-driver DSN's credentials and
	// its address: user:pass@tcp(host:3306)/db, user:pass@/db.
	mysqlAt = regexp.MustCompile(`@(?:[A-Za-z0-9]+\(|/)`)
	// queryParam finds a parameter's name= in a query (from its '?').
	queryParam = regexp.MustCompile(`[?&][A-Za-z_][A-Za-z0-9_.\-]*=`)
	// mysqlAddr is what follows that '@' in a whole DSN.
	mysqlAddr = regexp.MustCompile(`^@(?:[A-Za-z0-9]+\(|/)`)
)

// tokenSchemes read a userinfo without a colon as a credential.
var tokenSchemes = map[string]bool{"nats": true, "tls": true, "ws": true, "wss": true, "redis": true, "rediss": true}

// secretWords mark a parameter name as naming a secret when its
// normalized form contains one; secretNames when it is one.
var (
	secretWords = []string{"pass", "pwd", "secret", "token", "credential", "apikey", "accesskey", "privatekey", "signature"}
	secretNames = map[string]bool{"sig": true, "jwt": true, "nkey": true, "seed": true}
)

// secretName reports whether a query parameter or keyword named name holds
// a secret (see the package doc for the rule).
func secretName(name string) bool {
	n := strings.Map(func(r rune) rune {
		switch {
		case r == '_' || r == '-' || r == '.':
			return -1
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return r
	}, name)
	if strings.HasSuffix(n, "file") || strings.HasSuffix(n, "path") {
		return false
	}
	if secretNames[n] {
		return true
	}
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// connSpans finds the secrets of a whole connection string.
func connSpans(raw string) []span {
	if loc := schemeStart.FindStringIndex(raw); loc != nil && loc[0] == 0 {
		var spans []span
		starts := urlStarts(raw, ",")
		for i, st := range starts {
			end := len(raw)
			if i+1 < len(starts) {
				end = starts[i+1][0]
			}
			spans = append(spans, urlSpans(raw, st[0], end)...)
		}
		return spans
	}
	spans := kvSpans(raw, 0, len(raw), nil)
	// A go-sql-driver DSN: the driver takes the last '@' before the last
	// '/', and the password after the first ':' before it.
	if slash := strings.LastIndexByte(raw, '/'); slash >= 0 {
		if at := strings.LastIndexByte(raw[:slash], '@'); at >= 0 && mysqlAddr.MatchString(raw[at:]) {
			if c := strings.IndexByte(raw[:at], ':'); c >= 0 && c+1 < at {
				spans = append(spans, span{c + 1, at, asWritten})
			}
		}
	}
	return spans
}

// urlStarts finds where URLs begin in s: at its start, or after one of the
// bytes in after (any byte but those a URL's userinfo puts before "//",
// when after is empty), so that a password "//x" is not taken for a URL.
func urlStarts(s, after string) [][]int {
	var starts [][]int
	for _, m := range schemeStart.FindAllStringIndex(s, -1) {
		if m[0] > 0 {
			c := s[m[0]-1]
			if after != "" && strings.IndexByte(after, c) < 0 || after == "" && strings.IndexByte("/@%", c) >= 0 {
				continue
			}
			// After a ':' a scheme starts a URL of its own ("dial:redis://…"),
			// unless the ':' is inside a URL already ("u:pw://…" as a password).
			if after == "" && c == ':' && strings.Contains(s[strings.LastIndexAny(s[:m[0]], " \t\r\n\"'`<>(")+1:m[0]], "://") {
				continue
			}
		}
		starts = append(starts, m)
	}
	return starts
}

// textSpans finds the secrets in a message: in its URLs, then in the
// name=value pairs and MySQL DSNs outside them.
func textSpans(msg string) []span {
	var spans, urls []span
	starts := urlStarts(msg, "")
	for i, st := range starts {
		end := len(msg)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		if t := strings.IndexAny(msg[st[1]:end], " \t\r\n\"'`<>"); t >= 0 {
			end = st[1] + t
		}
		urls = append(urls, span{st[0], end, asWritten})
		spans = append(spans, urlSpans(msg, st[0], end)...)
	}
	inURL := func(i int) bool {
		for _, u := range urls {
			if i >= u.start && i < u.end {
				return true
			}
		}
		return false
	}
	spans = append(spans, kvSpans(msg, 0, len(msg), inURL)...)
	for _, m := range mysqlAt.FindAllStringIndex(msg, -1) {
		at := m[0]
		if inURL(at) {
			continue
		}
		from := strings.LastIndexAny(msg[:at], " \t\r\n\"'`") + 1
		if c := strings.IndexByte(msg[from:at], ':'); c >= 0 && from+c+1 < at {
			spans = append(spans, span{from + c + 1, at, asWritten})
		}
	}
	return spans
}

// urlSpans finds the secrets of the URL s[start:end], which begins with
// its scheme.
func urlSpans(s string, start, end int) []span {
	sep := strings.Index(s[start:end], "://")
	scheme := strings.ToLower(s[start : start+sep])
	p := start + sep + 3
	rest := s[p:end]
	var spans []span
	hostStart := 0
	if at := userinfoEnd(rest); at >= 0 {
		ui := rest[:at]
		if c := strings.IndexByte(ui, ':'); c >= 0 {
			if c+1 < at {
				spans = append(spans, span{p + c + 1, p + at, percentPath})
			}
		} else if tokenSchemes[scheme] && at > 0 {
			spans = append(spans, span{p, p + at, percentPath})
		}
		hostStart = at + 1
	}
	// The query runs to the end: a '#' in a secret value (which libpq
	// reads as part of it) is masked along with it.
	if q := strings.IndexByte(rest[hostStart:], '?'); q >= 0 {
		spans = append(spans, querySpans(s, p+hostStart+q+1, end)...)
	}
	return spans
}

// userinfoEnd returns the index of the '@' that ends the userinfo of rest
// (a URL after its "scheme://"), or -1: the last '@' that is followed by a
// host and is not in the query, an '@' being in the query when a
// parameter's name= stands between it and the '?' before it
// (?application_name=me@box).
// When there is none it is libpq's: the first '@' if no '/' comes before
// it; and failing that, when what precedes the first '/' or '?' cannot be a
// host list, the last '@' followed by a host, wherever it stands.
func userinfoEnd(rest string) int {
	last := -1
	for j := len(rest) - 1; j >= 0; j-- {
		if rest[j] != '@' || !hostAfter(rest[j+1:]) {
			continue
		}
		if last < 0 {
			last = j
		}
		if q := strings.LastIndexByte(rest[:j], '?'); q >= 0 && queryParam.MatchString(rest[q:j]) {
			continue
		}
		if strings.HasPrefix(rest[j+1:], "?") && last > j {
			// No host, then the query holding the later '@': rather
			// the password "@?…=" than a query with an '@' after an
			// empty host.
			return last
		}
		return j
	}
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		return i
	}
	auth := rest
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		auth = rest[:i]
	}
	if !validHostList(auth) {
		return last
	}
	return -1
}

// hostAfter reports whether s can follow the '@' that ends a userinfo: a
// run of host-list characters not followed by another '@'.
func hostAfter(s string) bool {
	i := 0
	for i < len(s) && hostListByte(s[i]) {
		i++
	}
	return i == len(s) || s[i] != '@'
}

func hostListByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("._~%-:,[]", c) >= 0
}

// validHostList reports whether s is a comma-separated list of host[:port]
// with numeric ports (hosts may be empty, as libpq allows).
func validHostList(s string) bool {
	for _, h := range strings.Split(s, ",") {
		if strings.HasPrefix(h, "[") {
			e := strings.IndexByte(h, ']')
			if e < 0 {
				return false
			}
			h = h[e+1:]
			if h != "" && h[0] != ':' {
				return false
			}
		}
		name, port, _ := strings.Cut(h, ":")
		for i := 0; i < len(name); i++ {
			if !hostListByte(name[i]) || name[i] == ':' || name[i] == ',' {
				return false
			}
		}
		for i := 0; i < len(port); i++ {
			if port[i] < '0' || port[i] > '9' {
				return false
			}
		}
	}
	return true
}

// querySpans finds the secret values of the query s[start:end].
func querySpans(s string, start, end int) []span {
	var spans []span
	for a := start; a < end; {
		b := strings.IndexByte(s[a:end], '&')
		if b < 0 {
			b = end
		} else {
			b += a
		}
		if eq := strings.IndexByte(s[a:b], '='); eq >= 0 && a+eq+1 < b {
			name := s[a : a+eq]
			if d, err := url.QueryUnescape(name); err == nil {
				name = d
			}
			if secretName(name) {
				spans = append(spans, span{a + eq + 1, b, percentQuery})
			}
		}
		a = b + 1
	}
	return spans
}

// kvSpans finds the secret values of the name=value pairs in s[start:end]
// whose names do not start inside a URL (skip; nil skips none).
func kvSpans(s string, start, end int, skip func(int) bool) []span {
	var spans []span
	covered := start
	for _, m := range nameEquals.FindAllStringSubmatchIndex(s[start:end], -1) {
		k, v := start+m[0], start+m[1]
		if k < covered || (skip != nil && skip(k)) {
			continue
		}
		if k > 0 && (nameByte(s[k-1]) || s[k-1] == '%') {
			continue
		}
		name := strings.TrimRight(s[k:v-1], " \t")
		if !secretName(name) {
			continue
		}
		spaced := m[3] > m[2]
		if spaced || skip == nil {
			for v < end && (s[v] == ' ' || s[v] == '\t') {
				v++
			}
		}
		inQuery := k > 0 && (s[k-1] == '?' || s[k-1] == '&')
		sp := valueSpan(s, v, end, inQuery)
		if sp.end > sp.start {
			spans = append(spans, sp)
		}
		covered = sp.end
	}
	return spans
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// valueSpan returns the value starting at s[v]: quoted by ' or " (the
// quotes excluded; a backslash escapes the next byte), or up to a blank, a
// double quote, a backtick or, in a URL query, an '&'.
func valueSpan(s string, v, end int, inQuery bool) span {
	if v < end && (s[v] == '\'' || s[v] == '"') {
		q := s[v]
		i := v + 1
		for i < end && s[i] != q {
			if s[i] == '\\' {
				i++
			}
			i++
		}
		return span{v + 1, min(i, end), backslashed}
	}
	i := v
	for i < end {
		c := s[i]
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '"' || c == '`' || (inQuery && c == '&') {
			break
		}
		if c == '\\' {
			i++
		}
		i++
	}
	return span{v, min(i, end), backslashed}
}

// knownSpans finds where one of the secrets stands as a whole value in a
// userinfo (between ':' or "//" and '@') or name=value position.
func knownSpans(msg string, secrets []string) []span {
	var spans []span
	for _, sec := range secrets {
		for i := 0; i < len(msg); {
			j := strings.Index(msg[i:], sec)
			if j < 0 {
				break
			}
			a := i + j
			b := a + len(sec)
			if wholeSecretAt(msg, a, b) {
				spans = append(spans, span{a, b, asWritten})
			}
			i = a + 1
		}
	}
	return spans
}

func wholeSecretAt(msg string, a, b int) bool {
	left, right := msg[:a], msg[b:]
	if strings.HasPrefix(right, "@") && (strings.HasSuffix(left, ":") || strings.HasSuffix(left, "//")) {
		return true
	}
	var quote byte
	if n := len(left); n > 0 && (left[n-1] == '\'' || left[n-1] == '"') {
		quote = left[n-1]
		left = left[:n-1]
	}
	left = strings.TrimRight(left, " \t")
	if !strings.HasSuffix(left, "=") {
		return false
	}
	if quote != 0 {
		return len(right) > 0 && right[0] == quote
	}
	return right == "" || strings.IndexByte(" \t\r\n&\"'`),;", right[0]) >= 0
}
