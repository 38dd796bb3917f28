package redact

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"testing"
)

func TestURL(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		// URL userinfo.
		{"pg password", "postgres://u:s3cret@db.example:5432/app", "postgres://u:xxxxx@db.example:5432/app"},
		{"pg no password", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"},
		{"pg empty password", "postgres://u:@h/db", "postgres://u:@h/db"},
		{"pg user only is a user", "postgres://alice@h/db", "postgres://alice@h/db"},
		{"encoded password", "postgres://u:p%23w%40x@h/db", "postgres://u:xxxxx@h/db"},
		{"password is a substring of user and host", "postgres://postgres:post@postgres.host/postgres", "postgres://postgres:xxxxx@postgres.host/postgres"},
		{"one-char password", "postgres://u:1@127.0.0.1:5432/db1", "postgres://u:xxxxx@127.0.0.1:5432/db1"},
		// Unencoded reserved characters pgx accepts or people paste.
		{"unencoded #", "postgres://u:p#w@h:5432/db", "postgres://u:xxxxx@h:5432/db"},
		{"unencoded ?", "postgres://u:p?w@h:5432/db?sslmode=disable", "postgres://u:xxxxx@h:5432/db?sslmode=disable"},
		{"unencoded @", "postgres://u:p@w@h:5432/db", "postgres://u:xxxxx@h:5432/db"},
		{"unencoded /", "postgres://u:ab/cd+e==@h:5432/db", "postgres://u:xxxxx@h:5432/db"},
		{"unencoded / ? #", "postgres://u:a/b?c#d@h/db", "postgres://u:xxxxx@h/db"},
		{"unencoded space", "postgres://u:my pass@h/db", "postgres://u:xxxxx@h/db"},
		{"@ in query is not userinfo", "postgres://u:pw@h/db?application_name=me@box", "postgres://u:xxxxx@h/db?application_name=me@box"},
		{"@ in query, no userinfo", "postgres://h/db?application_name=me@box", "postgres://h/db?application_name=me@box"},
		// Multi-host.
		{"pgx multi-host", "postgres://u:pw@h1:5432,h2:5433,[::1]:5434/db?target_session_attrs=read-write", "postgres://u:xxxxx@h1:5432,h2:5433,[::1]:5434/db?target_session_attrs=read-write"},
		{"kafka multi-host", "kafka://u:pw@h1:9092,h2:9092", "kafka://u:xxxxx@h1:9092,h2:9092"},
		{"nats list", "nats://a:pw1@h1:4222,nats://TOK@h2:4222", "nats://a:xxxxx@h1:4222,nats://xxxxx@h2:4222"},
		// Token schemes.
		{"nats token", "nats://TOKEN@127.0.0.1:4222", "nats://xxxxx@127.0.0.1:4222"},
		{"nats user password", "nats://user:pw@127.0.0.1:4222", "nats://user:xxxxx@127.0.0.1:4222"},
		{"tls token", "tls://TOKEN@h:4222", "tls://xxxxx@h:4222"},
		{"redis password only", "redis://:pw@h:6379/0", "redis://:xxxxx@h:6379/0"},
		{"redis lone userinfo", "redis://pw@h:6379/0", "redis://xxxxx@h:6379/0"},
		{"amqp lone userinfo is a user", "amqp://guest@h:5672/", "amqp://guest@h:5672/"},
		{"amqp", "amqp://guest:guest@127.0.0.1:5672/", "amqp://guest:xxxxx@127.0.0.1:5672/"},
		// Query parameters.
		{"query password", "postgres://u@h/db?sslmode=disable&password=pw", "postgres://u@h/db?sslmode=disable&password=xxxxx"},
		{"query many", "postgres://h/db?sslpassword=a&Token=b&secret=c&access_key=d&apikey=e&api_key=f&auth_token=g&sasl_password=h&sslmode=require",
			"postgres://h/db?sslpassword=xxxxx&Token=xxxxx&secret=xxxxx&access_key=xxxxx&apikey=xxxxx&api_key=xxxxx&auth_token=xxxxx&sasl_password=xxxxx&sslmode=require"},
		{"query encoded name", "postgres://h/db?pass%77ord=pw", "postgres://h/db?pass%77ord=xxxxx"},
		{"query # in value", "postgres://h/db?password=a#b&x=1", "postgres://h/db?password=xxxxx&x=1"},
		{"query file names exempt", "postgres://h/db?passfile=/etc/pgpass&sslkey=/k.pem", "postgres://h/db?passfile=/etc/pgpass&sslkey=/k.pem"},
		{"query and userinfo", "mysql://root:pw@h:3306/db?tls=true&password=q", "mysql://root:xxxxx@h:3306/db?tls=true&password=xxxxx"},
		// Keyword DSNs.
		{"keyword", "host=h user=postgres password=pw dbname=test", "host=h user=postgres password=xxxxx dbname=test"},
		{"keyword quoted", `host=h password='a b\' c' user=u`, `host=h password='xxxxx' user=u`},
		{"keyword spaced", "host=h password = pw user=u", "host=h password = xxxxx user=u"},
		{"keyword unterminated quote", "host=h password='a b user=u", "host=h password='xxxxx"},
		{"keyword sslpassword", "host=h sslpassword=k sslmode=verify-full", "host=h sslpassword=xxxxx sslmode=verify-full"},
		{"keyword & is literal", "host=h password=a&b user=u", "host=h password=xxxxx user=u"},
		{"keyword no secret", "host=h user=postgres dbname=test", "host=h user=postgres dbname=test"},
		// go-sql-driver DSNs.
		{"mysql dsn", "root:pw@tcp(127.0.0.1:3306)/test?parseTime=true", "root:xxxxx@tcp(127.0.0.1:3306)/test?parseTime=true"},
		{"mysql dsn @ in password", "root:p@w@tcp(h:3306)/test", "root:xxxxx@tcp(h:3306)/test"},
		{"mysql dsn unix", "u:pw@unix(/run/mysqld.sock)/db", "u:xxxxx@unix(/run/mysqld.sock)/db"},
		{"mysql dsn no address", "u:pw@/db", "u:xxxxx@/db"},
		{"mysql dsn no password", "root@tcp(h)/db", "root@tcp(h)/db"},
		// SQLite and paths: no secrets.
		{"sqlite", "sqlite:/var/lib/app/outbox.db?_pragma=busy_timeout(5000)", "sqlite:/var/lib/app/outbox.db?_pragma=busy_timeout(5000)"},
		{"sqlite @ in path", "sqlite:/tmp/a:b@c/x.db", "sqlite:/tmp/a:b@c/x.db"},
		{"file", "file:test.db?cache=shared&mode=memory", "file:test.db?cache=shared&mode=memory"},
		{"sqlite url", "sqlite:///abs/path.db", "sqlite:///abs/path.db"},
		{"empty", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := URL(c.in); got != c.want {
				t.Errorf("URL(%q)\n got %q\nwant %q", c.in, got, c.want)
			}
		})
	}
}

func TestSecrets(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"postgres://u:p%23w@h/db", []string{"p%23w", "p#w"}},
		{`host=h password='a\'b'`, []string{`a\'b`, "a'b"}},
		{"nats://TOK@h", []string{"TOK"}},
		{"postgres://u@h/db", nil},
	} {
		if got := Secrets(c.in); !slices.Equal(got, c.want) {
			t.Errorf("Secrets(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestText(t *testing.T) {
	for _, c := range []struct {
		name string
		msg  string
		raws []string
		want string
	}{
		// What drivers really say: pgx names user and database, never the
		// password; pgx's own parse errors are already masked (6 x's).
		{"pgx connect", "pgstore: cannot reach 127.0.0.1:1: failed to connect to `user=postgres database=test`: 127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1: connect: connection refused",
			[]string{"postgres://postgres:post@127.0.0.1:1/test"},
			"pgstore: cannot reach 127.0.0.1:1: failed to connect to `user=postgres database=test`: 127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1: connect: connection refused"},
		// A URL right after a ':' (no space), as some libraries print it.
		{"URL after a colon", "dial:postgres://u:sekret@h/db failed", nil, "dial:postgres://u:xxxxx@h/db failed"},
		{"AMQP URL after a colon", "error:amqp://guest:sekret@h:5672/", nil, "error:amqp://guest:xxxxx@h:5672/"},
		{"a password that looks like a scheme", "postgres://u:pw://x@h/db", nil, "postgres://u:xxxxx@h/db"},
		{"password 1 leaves 127.0.0.1", "dial tcp 127.0.0.1:1: connect: connection refused", []string{"postgres://u:1@127.0.0.1:1/db"}, "dial tcp 127.0.0.1:1: connect: connection refused"},
		{"pgx parse error", "cannot parse `postgres://postgres:xxxxxx@127.0.0.1:1/test`: invalid port", nil, "cannot parse `postgres://postgres:xxxxx@127.0.0.1:1/test`: invalid port"},
		{"mysql access denied", "Error 1045 (28000): Access denied for user 'root'@'127.0.0.1' (using password: YES)", []string{"mysql://root:YES@h/db"},
			"Error 1045 (28000): Access denied for user 'root'@'127.0.0.1' (using password: YES)"},
		// URLs echoed whole.
		{"echoed url", `parse "nats://u:p%zz@127.0.0.1:4222": invalid URL escape "%zz"`, nil, `parse "nats://u:xxxxx@127.0.0.1:4222": invalid URL escape "%zz"`},
		{"echoed url with space", `parse "nats://us er:p w@127.0.0.1:4222": net/url: invalid userinfo`, []string{"nats://us er:p w@127.0.0.1:4222"},
			`parse "nats://us er:xxxxx@127.0.0.1:4222": net/url: invalid userinfo`},
		{"token url in text", "connect to nats://TOKEN@127.0.0.1:4222: no servers", nil, "connect to nats://xxxxx@127.0.0.1:4222: no servers"},
		{"url with query", "open postgres://h/db?password=pw&sslmode=disable failed", nil, "open postgres://h/db?password=xxxxx&sslmode=disable failed"},
		// name=value pairs.
		{"kv", "failed: host=h user=postgres password=pw dbname=test", nil, "failed: host=h user=postgres password=xxxxx dbname=test"},
		{"kv quoted", `failed: password='a b' user=u`, nil, `failed: password='xxxxx' user=u`},
		{"kv in Go quotes", `dsn "user=u password=pw"`, nil, `dsn "user=u password=xxxxx"`},
		{"kv not a name", "xpassword_hint: see docs; password: YES", nil, "xpassword_hint: see docs; password: YES"},
		{"mysql dsn in text", "open root:pw@tcp(127.0.0.1:3306)/test: refused", nil, "open root:xxxxx@tcp(127.0.0.1:3306)/test: refused"},
		// Known secrets only where they stand whole.
		{"known in userinfo", `parse "nats://u:p": invalid port ":p" after host`, []string{"nats://u:p#w@h:4222"}, `parse "nats://u:p": invalid port ":p" after host`},
		{"known as value", "auth failed with token=s3cr", []string{"nats://s3cr@h"}, "auth failed with token=xxxxx"},
		{"known inside a word", "user=postgres at postgres.example", []string{"postgres://u:post@h/db"}, "user=postgres at postgres.example"},
		{"known whole after =", "user=post", []string{"postgres://u:post@h/db"}, "user=xxxxx"},
		{"known decoded", "auth as u:p#w@h", []string{"postgres://u:p%23w@h/db"}, "auth as u:xxxxx@h"},
		{"no secret", "outbox relay: started owner=a table=outbox", []string{"postgres://u@h/db"}, "outbox relay: started owner=a table=outbox"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Text(c.msg, c.raws...); got != c.want {
				t.Errorf("Text(%q, %q)\n got %q\nwant %q", c.msg, c.raws, got, c.want)
			}
		})
	}
}

func TestError(t *testing.T) {
	if Error(nil, "x") != nil {
		t.Fatal("Error(nil) != nil")
	}
	plain := errors.New("no secret here")
	if Error(plain, "postgres://u:pw@h/db") != plain {
		t.Error("an error without a secret was replaced")
	}
	orig := fmt.Errorf("connect postgres://u:pw@h/db: %w", fs.ErrNotExist)
	red := Error(orig, "postgres://u:pw@h/db")
	if got, want := red.Error(), "connect postgres://u:xxxxx@h/db: file does not exist"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if !errors.Is(red, fs.ErrNotExist) {
		t.Error("the redacted error lost its chain")
	}
}

func TestSecretName(t *testing.T) {
	for name, want := range map[string]bool{
		"password": true, "PASSWORD": true, "sslpassword": true, "passwd": true, "pwd": true, "sasl_password": true,
		"token": true, "auth_token": true, "client_secret": true, "api_key": true, "apikey": true, "access_key": true,
		"X-Amz-Signature": true, "private_key": true, "key": false, "partition_key": false, "nkey": true, "credentials": true,
		"user": false, "host": false, "sslmode": false, "sslkey": false, "passfile": false, "token_file": false, "dbname": false, "keepalives": false,
	} {
		if got := secretName(name); got != want {
			t.Errorf("secretName(%q) = %v, want %v", name, got, want)
		}
	}
}
