package wire_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/store"
)

// withPassword returns the service URL raw with its password set to pw,
// written as is (unencoded).
func withPassword(t *testing.T, raw, pw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	user := "root"
	if u.User != nil {
		user = u.User.Username()
	}
	u.User = nil
	scheme, rest, _ := strings.Cut(u.String(), "://")
	return scheme + "://" + user + ":" + pw + "@" + rest
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type openCase struct {
	name    string
	raw     string
	usage   bool     // errors.Is(err, wire.ErrUsage)
	secrets []string // must not appear
	says    []string // must appear: what is wrong, where, as whom
}

func checkOpenErr(t *testing.T, c openCase, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: opened", c.raw)
	}
	msg := err.Error()
	t.Log(msg)
	if got := errors.Is(err, wire.ErrUsage); got != c.usage {
		t.Errorf("errors.Is(err, ErrUsage) = %v, want %v", got, c.usage)
	}
	for _, s := range c.secrets {
		if strings.Contains(msg, s) {
			t.Errorf("the error shows %q: %s", s, msg)
		}
	}
	for _, s := range c.says {
		if !strings.Contains(msg, s) {
			t.Errorf("the error does not say %q: %s", s, msg)
		}
	}
}

func TestOpenStoreErrorsHideSecrets(t *testing.T) {
	t.Parallel()
	pg := testenv.Require(t, testenv.Postgres)
	my := testenv.Require(t, testenv.MySQL)
	closed := closedPort(t)
	cases := []openCase{
		// PostgreSQL answers (trust auth ignores the password): the driver
		// names user and database; a password that is part of "postgres"
		// must not mangle them. A refusal (a missing database, a wrong
		// password) is a usage error: the operator's to fix, exit 2.
		{"pg missing database", strings.Replace(withPassword(t, pg, "post"), "/test", "/outbox_no_such_db", 1), true,
			[]string{"post@", "xxxxxgres"}, []string{`database "outbox_no_such_db" does not exist`, "127.0.0.1"}},
		{"pg unreachable", "postgres://postgres:post@" + closed + "/test", false,
			[]string{"post@", "xxxxxgres"}, []string{"user=postgres", "database=test", closed, "refused"}},
		{"pg one-char password", "postgres://postgres:1@" + closed + "/test", false,
			[]string{":1@", "xxxxx27"}, []string{closed, "user=postgres"}},
		{"pg password in query", "postgres://postgres@" + closed + "/test?password=S3CRET&connect_timeout=x", true,
			[]string{"S3CRET"}, []string{"connect_timeout"}},
		{"pg unencoded # and ?", "postgres://postgres:S3#C?RET@" + closed + "/test", false,
			[]string{"S3#C?RET", "S3", "RET"}, []string{closed, "user=postgres"}},
		{"pg unencoded @", "postgres://postgres:S3C@RET@" + closed + "/test", true,
			[]string{"S3C", "RET@"}, []string{"percent-encode", "%40", "postgres:xxxxx@" + closed}},
		{"pg keyword DSN", "host=127.0.0.1 user=postgres password=S3CRET dbname=test", true,
			[]string{"S3CRET"}, []string{"no scheme", "user=postgres"}},
		// MariaDB checks the password.
		{"mysql wrong password", withPassword(t, my, "S3CRET"), true,
			[]string{"S3CRET"}, []string{"Access denied for user 'root'", "127.0.0.1:3306"}},
		{"mysql one-char password", withPassword(t, my, "1"), true,
			[]string{":1@", "xxxxx27"}, []string{"Access denied", "127.0.0.1:3306"}},
		{"mysql unreachable", "mysql://root:S3CRET@" + closed + "/test", false,
			[]string{"S3CRET"}, []string{closed}},
		{"mysql unencoded ?", "mysql://root:S3?CRET@127.0.0.1:3306/test", true,
			[]string{"S3?CRET", ":S3", "CRET"}, []string{"percent-encode", "%3F", "root:xxxxx@127.0.0.1:3306"}},
		{"mysql unencoded #", "mysql://root:S3#CRET@127.0.0.1:3306/test", true,
			[]string{":S3", "CRET"}, []string{"percent-encode", "%23"}},
		{"mysql unencoded /", "mysql://root:S3/CRET@127.0.0.1:3306/test", true,
			[]string{":S3", "CRET"}, []string{"percent-encode", "%2F"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			st, err := wire.OpenStore(ctx, c.raw, store.Options{})
			if st != nil {
				st.Close()
			}
			checkOpenErr(t, c, err)
			// The same URL through database/sql, as bench and demo open it.
			if db, _, err := wire.SQLDB(c.raw); err != nil {
				checkOpenErr(t, openCase{c.name, c.raw, errors.Is(err, wire.ErrUsage), c.secrets, nil}, err)
			} else {
				err = db.PingContext(ctx)
				db.Close()
				if err != nil {
					checkOpenErr(t, openCase{c.name, c.raw, false, c.secrets, nil}, wire.ScrubError(err, c.raw))
				}
			}
		})
	}
}

func TestOpenBrokerErrorsHideSecrets(t *testing.T) {
	t.Parallel()
	closed := closedPort(t)
	for _, c := range []openCase{
		{"nats token", "nats://S3CRETTOKEN@" + closed, false, []string{"S3CRETTOKEN"}, []string{closed, "no servers"}},
		{"nats password", "nats://alice:S3CRET@" + closed, false, []string{"S3CRET"}, []string{"alice", closed}},
		{"nats list", "nats://alice:S3CRET@" + closed + ",nats://S3CRETTOKEN@" + closed, false, []string{"S3CRET"}, []string{"alice", closed}},
		{"nats unencoded #", "nats://alice:S3#CRET@" + closed, true, []string{":S3", "CRET"}, []string{"alice:xxxxx@" + closed, "percent-encode", "%23"}},
		{"nats unencoded /", "nats://alice:S3/CRET@" + closed, true, []string{":S3", "CRET"}, []string{"alice:xxxxx@" + closed, "percent-encode", "%2F"}},
		{"kafka list", "kafka://alice:S3CRET@" + closed + "," + closed, false, []string{"S3CRET"}, []string{"kafka", closed}},
		{"kafka unencoded /", "kafka://alice:S3/CRET@" + closed, true, []string{":S3", "CRET"}, []string{"alice:xxxxx@" + closed, "percent-encode"}},
		{"kafka bad option", "kafka://alice:S3CRET@" + closed + "?max_message=lots", true, []string{"S3CRET"}, []string{"max_message"}},
		{"rocketmq unreachable", "rocketmq://alice:S3CRET@" + closed + "," + closed + "?group=g", false, []string{"S3CRET"}, []string{"name server", closed, "refused"}},
		{"rocketmq bad port", "rocketmq://alice:S3CRET@127.0.0.1:98760", true, []string{"S3CRET"}, []string{"alice:xxxxx@", "98760", "port"}},
		{"rocketmq no port", "rocketmq://alice:S3CRET@h", true, []string{"S3CRET"}, []string{"host:port"}},
		{"rocketmq unknown option", "rocketmq://alice:S3CRET@" + closed + "?colour=red", true, []string{"S3CRET"}, []string{"colour"}},
		{"rocketmq credentials on a second host", "rocketmq://" + closed + ",alice:S3CRET@" + closed, true, []string{"S3CRET"}, []string{"first name server"}},
		{"redis unreachable", "redis://:S3CRET@" + closed + "/0", false, []string{"S3CRET"}, []string{closed, "refused"}},
		{"redis user and password", "rediss://alice:S3CRET@" + closed + "/0", false, []string{"S3CRET"}, []string{"alice", closed}},
		{"redis bad option", "redis://:S3CRET@" + closed + "/0?maxlen=many", true, []string{"S3CRET"}, []string{"maxlen", "xxxxx@" + closed}},
		{"redis unknown option", "redis://:S3CRET@" + closed + "/0?colour=red", true, []string{"S3CRET"}, []string{"colour"}},
		{"redis unencoded /", "redis://:S3/CRET@" + closed + "/0", true, []string{":S3", "CRET"}, []string{"percent-encode", "%2F"}},
		{"webhook bad secret", "https://hooks.example/{topic}?token=S3CRET&webhook_secret=whsec_S3CRET!", true, []string{"S3CRET"}, []string{"base64", "webhook"}},
		{"webhook secret without prefix", "https://hooks.example/{topic}?webhook_secret=S3CRET", true, []string{"S3CRET"}, []string{"whsec_"}},
		{"webhook password in URL", "https://alice:S3CRET@hooks.example/{topic}", true, []string{"S3CRET"}, []string{"user info", "alice"}},
		{"unknown scheme", "foo://alice:S3CRET@h", true, []string{"S3CRET"}, []string{"foo"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			br, err := wire.OpenBroker(ctx, c.raw)
			if br != nil {
				_ = br.Close(ctx)
			}
			checkOpenErr(t, c, err)
		})
	}
}

// An http(s) broker opens without contacting the endpoint; the secret can
// also come from OUTBOX_WEBHOOK_SECRET.
func TestOpenBrokerWebhook(t *testing.T) {
	t.Setenv(wire.WebhookSecretEnv, "whsec_S3CRET")
	_, err := wire.OpenBroker(context.Background(), "https://hooks.example/{topic}")
	checkOpenErr(t, openCase{"env secret", "https://hooks.example/{topic}", true, []string{"S3CRET"}, []string{"base64"}}, err)
	t.Setenv(wire.WebhookSecretEnv, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw2KcLzFWcSGQ=")
	b, err := wire.OpenBroker(context.Background(), "https://hooks.example/{topic}")
	if err != nil {
		t.Fatal(err)
	}
	_ = b.Close(context.Background())
}

func TestMask(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:pw@h:5432/db?sslmode=disable&password=q": "postgres://u:xxxxx@h:5432/db?sslmode=disable&password=xxxxx",
		"nats://TOKEN@127.0.0.1:4222":                          "nats://xxxxx@127.0.0.1:4222",
		"postgres://u:p#w@h/db":                                "postgres://u:xxxxx@h/db",
		"kafka://u:pw@h1:9092,h2:9092":                         "kafka://u:xxxxx@h1:9092,h2:9092",
		"sqlite:/var/lib/outbox.db":                            "sqlite:/var/lib/outbox.db",
		"postgres://postgres@127.0.0.1:5432/test":              "postgres://postgres@127.0.0.1:5432/test",
	} {
		if got := wire.Mask(in); got != want {
			t.Errorf("Mask(%q) = %q, want %q", in, got, want)
		}
	}
}
