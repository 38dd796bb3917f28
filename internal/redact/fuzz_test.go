package redact

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// keep returns s with only the bytes ok accepts, or def when none is left.
func keep(s string, ok func(byte) bool, def string) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < 24; i++ {
		if ok(s[i]) {
			b.WriteByte(s[i])
		}
	}
	if b.Len() == 0 {
		return def
	}
	return b.String()
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// printable is visible ASCII: what a password typed or generated holds.
func printable(c byte) bool { return c > ' ' && c < 0x7f }

// form builds a connection string carrying secret in one of the positions
// redact knows, and the same string with the secret masked. ok is false
// when the form cannot carry that secret well-formed.
func form(n uint8, user, secret, host, db string) (raw, want string, ok bool) {
	sub := func(tmpl, s string) string { return strings.ReplaceAll(tmpl, "SECRET", s) }
	var tmpl, enc string
	switch n % 9 {
	case 0: // URL password, percent-encoded as net/url writes it
		enc = strings.TrimPrefix(url.UserPassword(user, secret).String(), user+":")
		tmpl = "postgres://" + user + ":SECRET@" + host + ":5432/" + db + "?sslmode=disable"
	case 1: // URL password as typed, with the reserved characters pgx takes unencoded
		if strings.ContainsAny(secret, "@/'\"`<>") {
			return "", "", false // see case 0 and FuzzUnencodedPassword
		}
		enc = secret
		tmpl = "postgres://" + user + ":SECRET@" + host + ":5432/" + db
	case 2: // query parameter
		enc = url.QueryEscape(secret)
		tmpl = "postgres://" + user + "@" + host + "/" + db + "?sslmode=disable&password=SECRET&application_name=relay"
	case 3: // keyword DSN, quoted the libpq way
		enc = strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(secret)
		tmpl = "host=" + host + " user=" + user + " password='SECRET' dbname=" + db
	case 4: // keyword DSN, unquoted, blanks and quotes escaped
		if strings.ContainsAny(secret, "\"`'") {
			return "", "", false
		}
		enc = strings.NewReplacer(`\`, `\\`, ` `, `\ `).Replace(secret)
		tmpl = "host=" + host + " user=" + user + " password=SECRET dbname=" + db
	case 5: // go-sql-driver DSN (its password cannot hold a '/')
		if strings.Contains(secret, "/") {
			return "", "", false
		}
		enc = secret
		tmpl = user + ":SECRET@tcp(" + host + ":3306)/" + db + "?parseTime=true"
	case 6: // NATS token
		enc = url.User(secret).String()
		tmpl = "nats://SECRET@" + host + ":4222"
	case 7: // comma-separated broker list
		enc = strings.TrimPrefix(url.UserPassword(user, secret).String(), user+":")
		tmpl = "kafka://" + user + ":SECRET@" + host + ":9092," + host + "2:9092"
	case 8: // sslpassword among other keywords
		enc = strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(secret)
		tmpl = "host=" + host + " sslmode=verify-full sslpassword='SECRET' user=" + user
	}
	return sub(tmpl, enc), sub(tmpl, Mask), true
}

// FuzzSecretMasked: a connection string carrying a random secret comes out
// of URL, and of Text over a driver-like message that echoes it, exactly
// as written with the secret masked: no other byte changes, and the
// secret's position holds Mask whatever the secret shares with the user,
// host or database name.
func FuzzSecretMasked(f *testing.F) {
	for _, s := range []struct {
		n                      uint8
		user, secret, host, db string
	}{
		{0, "postgres", "s3cret", "127.0.0.1", "test"},
		{0, "postgres", "post", "postgres.local", "postgres"},
		{1, "u", "1", "127.0.0.1", "db1"},
		{1, "u", "p#w?x", "h", "db"},
		{1, "u", "a@b/c", "h", "db"},
		{1, "u", "ab/cd+ef==", "h", "db"},
		{1, "u", "%zz", "h", "db"},
		{2, "u", "p&w=x", "h", "db"},
		{3, "u", `a b'c\d`, "h", "db"},
		{4, "u", `a b\c`, "h", "db"},
		{5, "root", "p@w:x", "127.0.0.1", "test"},
		{6, "u", "TOKEN", "127.0.0.1", "x"},
		{7, "u", "pw", "broker", "x"},
		{8, "u", "k'ey", "h", "x"},
	} {
		f.Add(s.n, s.user, s.secret, s.host, s.db)
	}
	f.Fuzz(func(t *testing.T, n uint8, user, secret, host, db string) {
		user = keep(user, func(c byte) bool { return alnum(c) || c == '_' || c == '.' || c == '-' }, "u")
		host = keep(host, func(c byte) bool { return alnum(c) || c == '.' || c == '-' }, "h")
		db = keep(db, func(c byte) bool { return alnum(c) || c == '_' }, "db")
		secret = keep(secret, func(c byte) bool { return printable(c) || c == ' ' }, "")
		if secret == "" || strings.Contains(secret, Mask) {
			return
		}
		raw, want, ok := form(n, user, secret, host, db)
		if !ok {
			return
		}
		if got := URL(raw); got != want {
			t.Fatalf("URL(%q)\n got %q\nwant %q", raw, got, want)
		}
		// A secret that is the whole user, host or database name stands as
		// a whole value after '=' in the messages below and is masked
		// there too, by design.
		if secret == user || secret == host || secret == db {
			return
		}
		// A driver echoing the connection string in quotes or backticks.
		for _, wrap := range []string{"failed to connect to `%s`: refused", `parse %q: bad`, "cannot open %s"} {
			if wrap == `parse %q: bad` {
				if strings.ContainsAny(raw, `"\`) {
					continue // %q would escape the secret into another text
				}
			}
			msg, wantMsg := fmt.Sprintf(wrap, raw), fmt.Sprintf(wrap, want)
			if strings.Contains(wrap, "`") && strings.Contains(raw, "`") {
				continue
			}
			if got := Text(msg, raw); got != wantMsg {
				t.Fatalf("Text(%q, raw)\n got %q\nwant %q", msg, got, wantMsg)
			}
		}
		// What pgx says about the same connection: no secret, unchanged.
		msg := fmt.Sprintf("failed to connect to `user=%s database=%s`: %s:5432 (%s): dial error: dial tcp %s:5432: connect: connection refused", user, db, host, host, host)
		if standsWhole(msg, secret) {
			return // the message itself holds the secret as a whole value ("database=0`:" for the secret "0`:"): masked by design
		}
		if got := Text(msg, raw); got != msg {
			t.Fatalf("Text(%q, %q) changed a message without a secret:\n got %q", msg, raw, got)
		}
	})
}

// standsWhole reports whether secret occurs in msg as a whole value in a
// secret position.
func standsWhole(msg, secret string) bool {
	for i := 0; ; i++ {
		j := strings.Index(msg[i:], secret)
		if j < 0 {
			return false
		}
		i += j
		if wholeSecretAt(msg, i, i+len(secret)) {
			return true
		}
	}
}

// FuzzNoSecret: a message with no '@' and no '=' has no secret position,
// so Text leaves it unchanged byte for byte, whatever connection string is
// known; secret-free URLs come out of URL unchanged; and Text is
// idempotent on any message.
func FuzzNoSecret(f *testing.F) {
	for _, s := range []struct{ msg, raw, user, host string }{
		{"dial tcp 127.0.0.1:1: connect: connection refused", "postgres://u:1@127.0.0.1:1/db", "postgres", "127.0.0.1"},
		{"user postgres at postgres.example", "postgres://u:post@h/db", "postgres", "postgres.example"},
		{"Error 1045 (28000): Access denied for user 'root' (using password: YES)", "mysql://root:YES@h/db", "root", "localhost"},
		{"nats: no servers available for connection", "nats://TOKEN@h:4222", "u", "h"},
		{"password: hunter2 secret: x token: y", "host=h password=hunter2", "u", "h"},
	} {
		f.Add(s.msg, s.raw, s.user, s.host)
	}
	f.Fuzz(func(t *testing.T, msg, raw, user, host string) {
		if got := Text(Text(msg, raw), raw); got != Text(msg, raw) {
			t.Fatalf("Text is not idempotent on %q (raw %q):\n once  %q\n twice %q", msg, raw, Text(msg, raw), got)
		}
		clean := strings.NewReplacer("@", "", "=", "").Replace(msg)
		if got := Text(clean, raw); got != clean {
			t.Fatalf("Text(%q, %q) = %q: changed a message without a secret position", clean, raw, got)
		}
		if got := URL(clean); got != clean {
			t.Fatalf("URL(%q) = %q: changed a string without a secret position", clean, got)
		}
		user = keep(user, func(c byte) bool { return alnum(c) || c == '_' || c == '.' || c == '-' }, "u")
		host = keep(host, func(c byte) bool { return alnum(c) || c == '.' || c == '-' }, "h")
		for _, u := range []string{
			"postgres://" + user + "@" + host + ":5432/" + user + "?sslmode=disable&application_name=" + user,
			"mysql://" + user + "@" + host + ":3306/" + user,
			"amqp://" + user + "@" + host + ":5672/",
			"nats://" + host + ":4222," + host + ":4223",
			"host=" + host + " user=" + user + " dbname=" + user,
			"sqlite:/var/" + user + "/" + host + ".db?_pragma=busy_timeout(5000)",
		} {
			if got := URL(u); got != u {
				t.Fatalf("URL(%q) = %q: changed a URL without a secret", u, got)
			}
			if got := Text("open "+u+": refused", raw); got != "open "+u+": refused" && !strings.Contains(raw, "=") && !strings.Contains(raw, "@") {
				t.Fatalf("Text changed a message without a secret: %q", got)
			}
		}
	})
}

// FuzzUnencodedPassword: a password typed into a URL with any reserved
// character unencoded, '@' and '/' included (which no URL parser, pgx's
// included, reads as one password): URL and Text never show it whole,
// unless it is also a part of what is not secret.
func FuzzUnencodedPassword(f *testing.F) {
	for _, s := range []string{"a@b/c", "ab/cd+ef==", "@?", "p@ss/w#rd?", "//", "u:v@w", "@", "/"} {
		f.Add("postgres", "u", s, "h", "db")
	}
	f.Add("nats", "u", "t@k/n", "127.0.0.1", "")
	f.Fuzz(func(t *testing.T, scheme, user, secret, host, db string) {
		scheme = keep(scheme, alnum, "postgres")
		if c := scheme[0]; c >= '0' && c <= '9' {
			scheme = "x" + scheme
		}
		user = keep(user, func(c byte) bool { return alnum(c) || c == '_' || c == '.' || c == '-' }, "u")
		host = keep(host, func(c byte) bool { return alnum(c) || c == '.' || c == '-' }, "h")
		db = keep(db, func(c byte) bool { return alnum(c) || c == '_' }, "db")
		secret = keep(secret, func(c byte) bool { return printable(c) && strings.IndexByte("'\"`<>", c) < 0 }, "")
		if secret == "" || strings.Contains(secret, Mask) || queryParam.MatchString(secret) || strings.Contains(secret, "://") {
			return // a password holding "?name=" or "&name=" reads as a query (see userinfoEnd), one holding ",x://" as the next URL of a list
		}
		raw := scheme + "://" + user + ":" + secret + "@" + host + ":5432/" + db
		public := scheme + "://" + user + ":" + Mask + "@" + host + ":5432/" + db
		if strings.Contains("cannot parse ``: invalid port"+public, secret) {
			return
		}
		if got := URL(raw); strings.Contains(got, secret) {
			t.Fatalf("URL(%q) = %q shows the password", raw, got)
		}
		msg := "cannot parse `" + raw + "`: invalid port"
		if got := Text(msg, raw); strings.Contains(got, secret) {
			t.Fatalf("Text(%q) = %q shows the password", msg, got)
		}
	})
}
