package cli

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every bad flag value, URL or name is one line on stderr that names the
// flag, exit 2, before anything is opened, and no password in the output:
// the URLs of the cases carry one (s3cret).
func TestBadFlagsExitTwoNamingTheFlag(t *testing.T) {
	const (
		db  = "postgres://u:s3cret@127.0.0.1:1/db"
		nat = "nats://u:s3cret@127.0.0.1:1"
	)
	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "x.db")
	relay := func(extra ...string) []string {
		return append([]string{"relay", "--db", db, "--broker", nat}, extra...)
	}
	cfg := filepath.Join(t.TempDir(), "bad.conf")
	writeFile(t, cfg, "batch = 0\n")
	cases := []struct {
		args []string
		want string // the flag the message must name
	}{
		{relay("--batch", "0"), "--batch"},
		{relay("--batch", "-5"), "--batch"},
		{relay("--batch", "many"), "--batch"},
		{relay("--workers", "-1"), "--workers"},
		{relay("--workers", "0"), "--workers"},
		{relay("--max-inflight-bytes", "0"), "--max-inflight-bytes"},
		{relay("--max-inflight-bytes", "-1MiB"), "--max-inflight-bytes"},
		{relay("--max-inflight-bytes", "64MB"), "--max-inflight-bytes"},
		{relay("--max-inflight-bytes", "lots"), "--max-inflight-bytes"},
		{relay("--max-inflight-bytes", "99999999TiB"), "--max-inflight-bytes"},
		{relay("--lease", "-1s"), "--lease"},
		{relay("--lease", "0"), "--lease"},
		{relay("--lease", "50ms"), "--lease"},
		{relay("--lease", "soon"), "--lease"},
		{relay("--poll", "0"), "--poll"},
		{relay("--max-attempts", "0"), "--max-attempts"},
		{relay("--publish-timeout", "0"), "--publish-timeout"},
		{relay("--backoff", "0"), "--backoff"},
		{relay("--backoff-max", "-1m"), "--backoff-max"},
		{relay("--backoff", "2m", "--backoff-max", "1m"), "--backoff-max"},
		{relay("--keep-sent", "-1h"), "--keep-sent"},
		{relay("--owner", strings.Repeat("x", 65)), "--owner"},
		{relay("--dead-keys", "maybe"), "--dead-keys"},
		{relay("--log-level", "loud"), "--log-level"},
		{relay("--log-format", "xml"), "--log-format"},
		{relay("--trace-spans", "some"), "--trace-spans"},
		{relay("--otlp-endpoint", "127.0.0.1:4318"), "--otlp-endpoint"},
		{relay("--metrics-addr", "9464"), "--metrics-addr"},
		{relay("--metrics-max-topics", "0"), "--metrics-max-topics 0: give at least 1"},
		{relay("--metrics-addr", "127.0.0.1:"), "--metrics-addr"},
		{relay("--stall-after", "0"), "--stall-after"},
		{relay("--ready-grace", "-1s"), "--ready-grace"},
		{relay("--config", cfg), "batch"},
		{relay("extra"), `unexpected argument "extra"`},
		{relay("--table", ""), "--table"},
		{relay("--table", "Orders"), "--table"},
		{relay("--table", strings.Repeat("t", 51)), "--table"},
		{relay("--schema", "a-b"), "--schema"},
		{[]string{"relay", "--db", db, "--broker", "nats://"}, "--broker nats:// names no host"},
		{[]string{"relay", "--db", db, "--broker", "nats://u:s3cret@"}, "names no host"},
		{[]string{"relay", "--db", db, "--broker", "nats://127.0.0.1:4222,nats://"}, "names no host"},
		{[]string{"relay", "--db", db}, "no broker given"},
		{[]string{"relay", "--broker", nat, "--db", ""}, "no database given"},
		{[]string{"relay", "--db", db, "--broker", "kafka://u:s3cret@127.0.0.1:9092?bogus=1"}, "kafka"},
		{[]string{"migrate", "--db", sqlite, "--table", ""}, "--table"},
		{[]string{"migrate", "--db", db, "--table", "1x"}, "--table"},
		{[]string{"migrate", "--db", db, "--nope"}, "--nope"},
		{[]string{"status", "--db", db, "--max-age", "1m"}, "--max-age applies to --check"},
		{[]string{"status", "--db", db, "--check", "--max-age", "0"}, "--max-age"},
		{[]string{"status", "--db", db, "--check", "--max-age", "-5m"}, "--max-age"},
		{[]string{"status", "--db", db, "--table", ""}, "--table"},
		{[]string{"dead", "list", "--db", db, "--limit", "0"}, "--limit"},
		{[]string{"dead", "list", "--db", db, "--after", "-1"}, "--after"},
		{[]string{"dead", "list", "--db", db, "--all"}, "--all"},
		{[]string{"dead", "list", "--db", db, "7"}, "takes no event ids"},
		{[]string{"dead", "show", "--db", db, "--topic", "x", "7"}, "--topic"},
		{[]string{"dead", "retry", "--db", db, "--all", "7"}, "--all"},
		{[]string{"dead", "purge", "--db", db}, "--older-than"},
		{[]string{"dead", "purge", "--db", db, "--older-than", "-1h"}, "--older-than"},
		{[]string{"dead", "show", "7", "--db", db, "--topic", "orders"}, "--topic"},
		{[]string{"dead", "purge", "--db", db, "--older-than", "1h", "--after", "3"}, "--after"},
		{[]string{"dead", "bury", "--db", db}, `unknown dead command "bury"`},
		{[]string{"broker", "setup", "--broker", "nats://", "--stream", "S", "--subjects", "s"}, "names no host"},
		{[]string{"broker", "setup", "--broker", nat, "--subjects", "s"}, "--stream"},
		{[]string{"broker", "setup", "--broker", nat, "--stream", "A.B", "--subjects", "s"}, "--stream"},
		{[]string{"broker", "setup", "--broker", nat, "--stream", "S"}, "--subjects"},
		{[]string{"broker", "setup", "--broker", nat, "--stream", "S", "--subjects", "orders paid"}, "--subjects"},
		{[]string{"broker", "setup", "--broker", nat, "--stream", "S", "--subjects", "a.>.b"}, "--subjects"},
		{[]string{"broker", "setup", "--broker", nat, "--stream", "S", "--subjects", "a..b"}, "--subjects"},
		{[]string{"broker", "setup", "--db", db}, "--db"},
		{[]string{"broker", "teardown"}, `unknown broker command "teardown"`},
		{[]string{"version", "--verbose"}, "--verbose"},
		{[]string{"bench", "--db", db, "--broker", nat, "--events", "0"}, "--events"},
		{[]string{"bench", "--db", db, "--broker", nat, "--duration", "0"}, "--duration"},
		{[]string{"bench", "--db", db, "--broker", "kafka://u:s3cret@127.0.0.1:9092?bogus=1"}, "kafka"},
		{[]string{"torture", "--db", db, "--relays", "0"}, "--relays"},
		{[]string{"torture", "--db", db, "--duration", "1s"}, "--duration"},
		{[]string{"torture", "--db", db, "--broker", "nats://"}, "names no host"},
		{[]string{"demo", "--orders", "10"}, "--orders"},
		{[]string{"demo", "--broker", "kafka://u:s3cret@127.0.0.1:9092"}, "NATS JetStream only"},
		{[]string{"torture", "--db", db, "--broker", "kafka://u:s3cret@127.0.0.1:9092"}, "NATS JetStream only"},
		{[]string{"demo", "--broker", "nats://u:s3cret@"}, "names no host"},
	}
	for _, c := range cases {
		code, stdout, stderr := runCLI(c.args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want %d (stderr %q)", c.args, code, exitUsage, stderr)
		}
		if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
			t.Errorf("%q: stderr is not one line: %q", c.args, stderr)
		}
		if !strings.Contains(stderr, c.want) {
			t.Errorf("%q: stderr %q does not name %q", c.args, stderr, c.want)
		}
		if strings.Contains(stderr+stdout, "s3cret") || strings.Contains(stderr, "goroutine ") {
			t.Errorf("%q: output leaks the password or a stack: %q %q", c.args, stdout, stderr)
		}
	}
	if _, err := os.Stat(strings.TrimPrefix(sqlite, "sqlite:")); err == nil {
		t.Errorf("a refused command created %s", sqlite)
	}
}

// bench's own broker checks: what it measures (nats://, kafka://, kfake) is
// named when --broker is anything else, --partitions is Kafka's; one line,
// exit 2, no password, before the database is opened.
func TestBenchFlagsExitTwo(t *testing.T) {
	const db = "postgres://u:s3cret@127.0.0.1:1/db"
	cfg := filepath.Join(t.TempDir(), "bench.conf")
	writeFile(t, cfg, "partitions = 8\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--db", db, "--broker", "redis://:s3cret@127.0.0.1:6379/0"}, "nats://host:4222, kafka://host:9092[,host2:9092] or kfake"},
		{[]string{"bench", "--db", db, "--broker", "amqp://u:s3cret@127.0.0.1:5672/"}, "amqp://u:xxxxx@127.0.0.1:5672/"},
		{[]string{"bench", "--db", db, "--broker", "kfak"}, "or kfake"},
		{[]string{"bench", "--db", db, "--broker", "kafka://u:s3cret@127.0.0.1:9092?bogus=1"}, "kafka"},
		{[]string{"bench", "--db", db, "--broker", "kafka://"}, "--broker"},
		{[]string{"bench", "--db", db, "--broker", "kfake", "--partitions", "0"}, "--partitions"},
		{[]string{"bench", "--db", db, "--broker", "nats://u:s3cret@127.0.0.1:1", "--partitions", "4"}, "--partitions applies to Kafka only"},
		{[]string{"bench", "--db", db, "--broker", "nats://u:s3cret@127.0.0.1:1", "--config", cfg}, "--partitions applies to Kafka only"},
		{[]string{"bench", "--db", db, "--broker", ""}, "bench needs --broker"},
	} {
		code, stdout, stderr := runCLI(c.args...)
		if code != exitUsage || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and one line naming %q", c.args, code, stderr, exitUsage, c.want)
		}
		if strings.Contains(stderr+stdout, "s3cret") {
			t.Errorf("%q: output leaks the password: %q %q", c.args, stdout, stderr)
		}
	}
}

// A value in range is taken as given, also from --config (a refused value
// would have exited 2 before the relay touched the database, which here is
// missing, so the exit is 1).
func TestGoodFlagsPassValidation(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "ok.conf")
	writeFile(t, cfg, "batch = 1\nworkers = 1\nlease = 100ms\npoll = 1ms\nmax-attempts = 1\npublish-timeout = 1ms\nkeep-sent = 0s\nbackoff = 1ms\nbackoff-max = 1ms\n")
	missing := "sqlite:" + filepath.Join(t.TempDir(), "missing.db")
	code, _, stderr := runCLI("relay", "--config", cfg, "--db", missing, "--broker", "nats://127.0.0.1:1")
	if code != exitFail || !strings.Contains(stderr, "does not exist") {
		t.Errorf("relay with every bound at its minimum: exit %d %q; want 1, the database file does not exist", code, stderr)
	}
}

// relay.New's errors name Config fields; the CLI says the flags instead.
func TestRelayConfigErrorsNameFlags(t *testing.T) {
	for in, want := range map[string]string{
		"LeaseFor must be at least 100ms":                     "--lease must be at least 100ms",
		"BackoffMax must not be below BackoffBase":            "--backoff-max must not be below --backoff",
		"PollInterval must not be negative (0 means default)": "--poll must not be negative (0 means default)",
		`Owner "x" is longer than 64 characters`:              `--owner "x" is longer than 64 characters`,
	} {
		if got := flagNames(in); got != want {
			t.Errorf("flagNames(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHelpSaysDashDash(t *testing.T) {
	code, out, _ := runCLI("relay", "--help")
	if code != exitOK || !strings.Contains(out, "\n  --batch n\n") || strings.Contains(out, "\n  -batch") {
		t.Errorf("relay --help: %d %q", code, out)
	}
}

// The relay's log keeps an error on one line: pgx's one line per
// connection attempt (the same dial error twice with sslmode=prefer)
// is joined, each attempt once.
func TestLogLinesStayOneLine(t *testing.T) {
	var b strings.Builder
	log, err := newLogger(&b, "text", "info")
	if err != nil {
		t.Fatal(err)
	}
	dial := "127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1: connect: connection refused"
	pgxErr := errors.New("claim: failed to connect to `user=postgres database=test`:\n\t" + dial + "\n\t" + dial + " (nothing was claimed)")
	log.Warn("relay: store failing", "error", pgxErr)
	log.With("why", "a\nb").Info("two\nlines", "s", "x\r\ny", slog.Group("g", "e", errors.New("p:\n\tq")))
	want := `level=WARN msg="relay: store failing" error="claim: failed to connect to ` + "`user=postgres database=test`" + `: ` + dial + ` (nothing was claimed)"` + "\n"
	lines := strings.SplitAfter(b.String(), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[0], want) {
		t.Fatalf("log:\n%s\nwant the first line to end in\n%s", b.String(), want)
	}
	if !strings.HasSuffix(lines[1], `level=INFO msg="two; lines" why="a; b" s="x; y" g.e="p: q"`+"\n") {
		t.Errorf("second line: %q", lines[1])
	}
}

// --max-inflight-bytes takes plain bytes and binary units, and says its
// value back in the largest unit that divides it.
func TestByteSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{
		"1": 1, "4096": 4096, "512B": 512, "64KiB": 64 << 10, "64MiB": 64 << 20, "1GiB": 1 << 30, "2 gib": 2 << 30, "1TiB": 1 << 40,
	} {
		var n int64
		if err := (byteSize{&n, 1}).Set(in); err != nil || n != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
	for n, want := range map[int64]string{1: "1", 1536: "1536", 64 << 10: "64KiB", 64 << 20: "64MiB", 3 << 30: "3GiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q; want %q", n, got, want)
		}
	}
}
