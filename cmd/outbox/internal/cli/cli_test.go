package cli

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/testkit/teststores"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// Bad input gets exactly one line naming what is wrong, never a stack trace.
func TestBadInputIsOneLine(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"nosuch"}, exitUsage, `unknown command "nosuch"`},
		{[]string{"migrate", "--bogus"}, exitUsage, "flag provided but not defined: --bogus"},
		{[]string{"migrate", "--db", "oracle://x"}, exitUsage, `unknown database scheme "oracle"`},
		{[]string{"migrate", "--db", "no-scheme-here"}, exitUsage, "has no scheme"},
		{[]string{"migrate", "--db", "postgres://u:s3cret@127.0.0.1:1/db"}, exitFail, "cannot reach"},
		{[]string{"migrate", "--db", "mysql://u:s3cret@127.0.0.1:1/db"}, exitFail, ""},
		{[]string{"migrate", "--db", "sqlite:/nonexistent-dir/x.db"}, exitFail, ""},
		{[]string{"migrate", "--db", "sqlite:x.db", "--table", `a"; DROP TABLE x; --`}, exitUsage, "--table"},
		{[]string{"relay", "--db", "sqlite::memory:", "--broker", "kafka://127.0.0.1:9092"}, 0, ""},
		{[]string{"relay", "--db", "sqlite:" + t.TempDir() + "/x.db", "--broker", "nats://127.0.0.1:4222", "--dead-keys", "maybe"}, exitUsage, "--dead-keys must be hold or skip"},
		{[]string{"dead"}, exitUsage, "say list, show, retry or purge"},
		{[]string{"dead", "retry", "--db", "sqlite:x.db"}, exitUsage, "needs event ids"},
		{[]string{"dead", "show", "abc", "--db", "sqlite:x.db"}, exitUsage, "not an event id"},
		{[]string{"status"}, exitUsage, "no database given"},
		// A URL the driver cannot parse is a typing error, refused before
		// anything is dialled; the relay does not wait for it either.
		{[]string{"migrate", "--db", "postgres://u:s3cret@127.0.0.1:5432/test?sslmode=bogus"}, exitUsage, "sslmode is invalid"},
		{[]string{"status", "--db", "postgres://u:s3cret@127.0.0.1:5432/test?connect_timeout=abc"}, exitUsage, "invalid connect_timeout"},
		{[]string{"status", "--db", "postgres://u:s3cret@[::1"}, exitUsage, "bad database URL"},
		{[]string{"status", "--db", "postgres://a b:s3cret@127.0.0.1/test"}, exitUsage, "bad database URL"},
		{[]string{"dead", "list", "--db", "mysql://root:s3cret@127.0.0.1/test?x=%zz"}, exitUsage, `invalid URL escape "%zz"`},
		{[]string{"migrate", "--db", "mysql://root:s3cret@tcp(h:1)/test"}, exitUsage, "bad database URL"},
		{[]string{"migrate", "--db", "mysql://root:s3cret@127.0.0.1:3306/"}, exitUsage, "names no database"},
		{[]string{"migrate", "--db", "sqlite:" + t.TempDir() + "/x.db?mode=rw"}, exitUsage, `unknown parameter "mode"`},
		{[]string{"relay", "--db", "postgres://u@127.0.0.1:5432/test?sslmode=bogus", "--broker", "nats://127.0.0.1:4222"}, exitUsage, "sslmode is invalid"},
	}
	for _, c := range cases {
		code, _, stderr := runCLI(c.args...)
		if c.code == 0 { // only "one line, no secret, no panic" is checked
			c.code = code
		}
		if code != c.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, code, c.code, stderr)
		}
		if strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: stderr is not one line: %q", c.args, stderr)
		}
		if !strings.Contains(stderr, c.want) {
			t.Errorf("%v: stderr %q does not say %q", c.args, stderr, c.want)
		}
		if strings.Contains(stderr, "s3cret") || strings.Contains(stderr, "goroutine ") {
			t.Errorf("%v: stderr leaks a password or a stack: %q", c.args, stderr)
		}
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range commands() {
		code, out, _ := runCLI(c.name, "--help")
		if code != exitOK || !strings.Contains(out, "Usage: outbox "+c.name) {
			t.Errorf("%s --help: exit %d, output %q", c.name, code, out)
		}
	}
	if code, out, _ := runCLI("--help"); code != exitOK || !strings.Contains(out, "relay") {
		t.Errorf("--help: %d %q", code, out)
	}
}

// Against each real database: migrate, a missing table's hint, status and
// the dead-letter commands, and the config file.
func TestMigrateStatusDeadOnEachDatabase(t *testing.T) {
	for _, kind := range teststores.Kinds {
		t.Run(kind, func(t *testing.T) {
			url := teststores.URL(t, kind)
			table := teststores.UniqueTable("cli_")
			t.Cleanup(func() { teststores.Drop(t, kind, url, table) })
			if kind == "sqlite" { // an empty file is an empty database: the table is what is missing
				writeFile(t, strings.TrimPrefix(url, "sqlite:"), "")
			}
			// The missing table is named, with the database and the fix.
			if code, _, stderr := runCLI("status", "--db", url, "--table", table); code != exitFail ||
				!strings.Contains(stderr, "the outbox table "+table+" does not exist in ") ||
				!strings.Contains(stderr, "outbox migrate --db URL --table "+table) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("status before migrate: %d %q", code, stderr)
			}
			// The first migrate says it created the table, the second that
			// it is up to date; both name the schema version.
			for i, want := range []string{"created table " + table + " (schema version ", "table " + table + " is up to date (schema version "} {
				if code, out, stderr := runCLI("migrate", "--db", url, "--table", table); code != exitOK || !strings.Contains(out, want) {
					t.Fatalf("migrate #%d: %d %q %q; want %q", i+1, code, out, stderr, want)
				}
			}
			o := teststores.OpenAt(t, kind, url, store.Options{Table: table})
			ctx := context.Background()
			if _, err := o.DB.ExecContext(ctx, "INSERT INTO "+table+" (topic, event_key, event_type, payload) VALUES ('orders', 'order-42', 'OrderPaid', '{\"id\":42}')"); err != nil {
				t.Fatal(err)
			}
			c := teststores.Claim(t, o.Store, driver.ClaimParams{Lease: driver.Lease{Owner: "t", Epoch: 1}})
			if len(c.Events) != 1 {
				t.Fatalf("claim: %v", c.Events)
			}
			if err := o.Store.Bury(ctx, driver.BuryParams{Lease: c.Lease, Burials: []driver.Burial{{ID: c.Events[0].ID, Error: "permanent: rejected"}}}); err != nil {
				t.Fatal(err)
			}
			cfg := t.TempDir() + "/outbox.conf"
			writeFile(t, cfg, "# test config\ndb = "+url+"\ntable = "+table+"\n")
			code, out, stderr := runCLI("status", "--config", cfg)
			if code != exitOK || !regexp.MustCompile(`dead\s+1`).MatchString(out) || !regexp.MustCompile(`blocked keys\s+1`).MatchString(out) {
				t.Errorf("status: %d %q %q", code, out, stderr)
			}
			if code, out, _ := runCLI("status", "--config", cfg, "--json"); code != exitOK || !strings.Contains(out, `"dead": 1`) {
				t.Errorf("status --json: %d %q", code, out)
			}
			if code, out, _ := runCLI("dead", "list", "--config", cfg); code != exitOK || !strings.Contains(out, "order-42") || !strings.Contains(out, "permanent: rejected") {
				t.Errorf("dead list: %d %q", code, out)
			}
			id := c.Events[0].ID
			if code, out, _ := runCLI("dead", "show", itoa(id), "--config", cfg); code != exitOK || !strings.Contains(out, `{"id":42}`) {
				t.Errorf("dead show: %d %q", code, out)
			}
			if code, out, _ := runCLI("dead", "retry", itoa(id), "--config", cfg); code != exitOK || !strings.Contains(out, "requeued 1") {
				t.Errorf("dead retry: %d %q", code, out)
			}
			if s, _ := o.Store.Stats(ctx); s.New != 1 || s.Dead != 0 {
				t.Errorf("after retry: %+v", s)
			}
			// An id that names no DEAD event is named and fails the
			// command; a selector that matches nothing only says so.
			if code, out, stderr := runCLI("dead", "retry", itoa(id), "999999999", "--config", cfg); code != exitFail || out != "" ||
				!strings.Contains(stderr, "event "+itoa(id)+" is NEW, not DEAD; event 999999999 does not exist") || strings.Count(stderr, "\n") != 1 {
				t.Errorf("dead retry of a NEW and a missing id: %d %q %q", code, out, stderr)
			}
			if code, out, stderr := runCLI("dead", "retry", "--topic", "orders", "--config", cfg); code != exitOK || out != "no dead events of topic \"orders\": nothing requeued\n" || stderr != "" {
				t.Errorf("dead retry --topic matching nothing: %d %q %q", code, out, stderr)
			}
			if code, out, _ := runCLI("dead", "purge", "--older-than", "0s", "--config", cfg); code != exitOK || !strings.Contains(out, "purged 0") {
				t.Errorf("dead purge: %d %q", code, out)
			}
			if code, out, _ := runCLI("dead", "purge", "--older-than", "0s", "--topic", "orders", "--key", "order-42", "--config", cfg); code != exitOK || !strings.Contains(out, "purged 0") {
				t.Errorf("dead purge --topic --key: %d %q", code, out)
			}
		})
	}
}

func TestConnectionArgsFindEveryURLTheUserGave(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "relay.conf")
	writeFile(t, cfg, "# settings\ndb = \"postgres://u:fromfile@h/db\"\n--broker=nats://tok@h:4222\nbatch = 5\n")
	got := strings.Join(connectionArgs([]string{"--db", "mysql://a:b@h/d", "--broker=nats://x@h", "--config", cfg}), " ")
	for _, want := range []string{"mysql://a:b@h/d", "nats://x@h", "postgres://u:fromfile@h/db", "nats://tok@h:4222"} {
		if !strings.Contains(got, want) {
			t.Errorf("connectionArgs lacks %s: %q", want, got)
		}
	}
}

// A relay given a password on its command line says, once, that every
// local user can read it there and where to put it instead; a secret
// from the environment or --config draws no warning.
func TestRelayWarnsOfASecretOnTheCommandLine(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "x.db")
	if code, _, stderr := runCLI("migrate", "--db", db); code != exitOK {
		t.Fatal(stderr)
	}
	cfg := filepath.Join(dir, "relay.conf")
	writeFile(t, cfg, "broker = nats://s3cret@127.0.0.1:1\n")
	const warning = "--broker holds a password or secret, which every user of this machine can read"
	for _, c := range []struct {
		name string
		args []string
		env  string
		warn bool
	}{
		{"command line", []string{"--broker", "nats://s3cret@127.0.0.1:1"}, "", true},
		{"command line without a secret", []string{"--broker", "nats://127.0.0.1:1"}, "", false},
		{"config", []string{"--config", cfg}, "", false},
		{"environment", nil, "nats://s3cret@127.0.0.1:1", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("OUTBOX_BROKER", c.env)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			var stderr bytes.Buffer
			Main(ctx, append([]string{"relay", "--db", db}, c.args...), io.Discard, &stderr)
			if got := strings.Count(stderr.String(), warning); got != map[bool]int{true: 1, false: 0}[c.warn] {
				t.Errorf("the warning appears %d times, want it %v:\n%s", got, c.warn, stderr.String())
			}
			if c.warn && !strings.Contains(stderr.String(), "pass it in OUTBOX_BROKER or a --config file instead") {
				t.Errorf("the warning does not say where to put the secret:\n%s", stderr.String())
			}
			if strings.Contains(stderr.String(), "s3cret") {
				t.Errorf("the log shows the secret:\n%s", stderr.String())
			}
		})
	}
}
