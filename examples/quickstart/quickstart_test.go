package quickstart_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	"github.com/outbox-go/outbox/internal/testenv"
)

var bin string // the directory holding the built programs

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "quickstart-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	out, err := exec.Command("go", "build", "-o", dir+"/", "./producer", "./producersql", "./relay", "./consumer").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build the quick start programs: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// The Quick start end to end, as a reader runs it: the consumer (which
// creates the stream), the pgx producer, the relay in its own process. The
// consumer must apply the event once; the relay must stop cleanly on
// SIGTERM. Each run gets a database and a NATS server of its own, so the
// programs keep the fixed names the README shows.
func TestQuickStartPrograms(t *testing.T) {
	pgURL := freshPostgres(t)
	natsURL := privateNATS(t)

	consumer := start(t, "consumer", "--db", pgURL, "--broker", natsURL, "--count", "2")
	waitFor(t, "the consumer to create its stream", func() bool { return consumer.printed("waiting for OrderPaid") })
	run(t, "producer", "--db", pgURL, "--order", "7")
	relay := start(t, "relay", "--db", pgURL, "--broker", natsURL)
	run(t, "producer", "--db", pgURL, "--order", "8")

	consumer.wait(t, 60*time.Second)
	for _, want := range []string{"OrderPaid order-7 ", "OrderPaid order-8 "} {
		if !strings.Contains(consumer.out.String(), want) || !strings.Contains(consumer.out.String(), ": processed") {
			t.Errorf("the consumer did not process %q:\n%s", want, consumer.out.String())
		}
	}
	conn, err := pgx.Connect(context.Background(), pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var balance int
	if err := conn.QueryRow(context.Background(), `SELECT balance FROM points WHERE customer = 'alice'`).Scan(&balance); err != nil || balance != 24 {
		t.Errorf("points of alice: %d, %v; want 24 (two events of 120, a tenth each, applied once)", balance, err)
	}
	_ = relay.cmd.Process.Signal(os.Interrupt)
	relay.wait(t, 15*time.Second)
}

// producersql on MariaDB and on SQLite: the order and its event commit
// together.
func TestQuickStartProducerSQL(t *testing.T) {
	for _, db := range []string{freshMariaDB(t), "sqlite:" + filepath.Join(t.TempDir(), "app.db")} {
		run(t, "producersql", "--db", db, "--order", "7")
		run(t, "producersql", "--db", db, "--order", "8")
		var n int
		sqlDB := openSQL(t, db)
		if err := sqlDB.QueryRow(`SELECT COUNT(*) FROM outbox WHERE event_type = 'OrderPaid'`).Scan(&n); err != nil || n != 2 {
			t.Errorf("%s: %d OrderPaid events, %v; want 2", db, n, err)
		}
	}
}

// The README quotes the programs: every block marked with
// <!-- quickstart: PATH --> must appear in PATH as written.
func TestREADMEQuotesThePrograms(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)<!-- quickstart: (\\S+) -->\\s*```go\\n(.*?)```").FindAllSubmatch(readme, -1)
	if len(blocks) < 4 {
		t.Fatalf("README.md quotes %d quick start programs; want the four of examples/quickstart", len(blocks))
	}
	for _, b := range blocks {
		src, err := os.ReadFile(filepath.Join("../..", string(b[1])))
		if err != nil {
			t.Errorf("README.md quotes %s: %v", b[1], err)
			continue
		}
		if !strings.Contains(string(src), string(b[2])) {
			t.Errorf("README.md's block from %s is not in that file as written; copy it again:\n%s", b[1], b[2])
		}
	}
}

type proc struct {
	cmd *exec.Cmd
	out *syncBuffer
	end chan error
}

func (p *proc) printed(s string) bool { return strings.Contains(p.out.String(), s) }

func (p *proc) wait(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case err := <-p.end:
		if err != nil {
			t.Fatalf("%s: %v\n%s", p.cmd.Path, err, p.out.String())
		}
	case <-time.After(d):
		t.Fatalf("%s did not end within %v:\n%s", p.cmd.Path, d, p.out.String())
	}
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(filepath.Join(bin, name), args...), out: &syncBuffer{}, end: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.end <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	return p
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(bin, name), args...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OrderPaid enqueued") {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func unique(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// freshPostgres creates a database of the test's own and returns its URL.
func freshPostgres(t *testing.T) string {
	base := testenv.Require(t, testenv.Postgres)
	name := unique("quickstart_")
	conn, err := pgx.Connect(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	return strings.Replace(base, "/test", "/"+name, 1)
}

// freshMariaDB creates a database of the test's own and returns its URL.
func freshMariaDB(t *testing.T) string {
	base := testenv.Require(t, testenv.MySQL)
	name := unique("quickstart_")
	db := openSQL(t, base)
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP DATABASE " + name) })
	return strings.Replace(base, "/test", "/"+name, 1)
}

// openSQL opens mysql:// and sqlite: URLs with database/sql.
func openSQL(t *testing.T, raw string) *sql.DB {
	t.Helper()
	driver, dsn := "mysql", ""
	if path, ok := strings.CutPrefix(raw, "sqlite:"); ok {
		driver, dsn = "sqlite", path
	} else {
		rest := strings.TrimPrefix(raw, "mysql://")
		at := strings.LastIndex(rest, "@")
		slash := strings.Index(rest[at+1:], "/") + at + 1
		dsn = rest[:at+1] + "tcp(" + rest[at+1:slash] + ")" + rest[slash:]
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// privateNATS starts a JetStream server of the test's own on a free port.
func privateNATS(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	cmd := exec.Command("nats-server", "-a", "127.0.0.1", "-p", port, "-js", "-sd", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nats-server (Debian package nats-server): %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitFor(t, "nats-server on "+port, func() bool {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return "nats://127.0.0.1:" + port
}

// syncBuffer is an output buffer safe to read while the process writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
