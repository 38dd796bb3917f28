package inbox_test

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/inbox/inboxtest"
	"github.com/outbox-go/outbox/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harnesses returns the three databases; a server that does not answer
// fails the test under CI and skips it locally.
func harnesses() []struct {
	name string
	open func(t *testing.T) inboxtest.Harness
} {
	return []struct {
		name string
		open func(t *testing.T) inboxtest.Harness
	}{
		{"postgres", postgresHarness},
		{"mysql", mysqlHarness},
		{"sqlite", sqliteHarness},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, h := range harnesses() {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			inboxtest.Run(t, h.open(t))
		})
	}
}

func TestConcurrentDelivery(t *testing.T) {
	t.Parallel()
	for _, h := range harnesses() {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			inboxtest.RunConcurrent(t, h.open(t))
		})
	}
}

func postgresHarness(t *testing.T) inboxtest.Harness {
	raw := testenv.Require(t, testenv.Postgres)
	open := func(t testing.TB) *sql.DB {
		db, err := sql.Open("pgx", raw)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	ping(t, open(t), testenv.Postgres)
	return inboxtest.Harness{Name: "postgres", Open: open, Dialect: inbox.Postgres}
}

func mysqlHarness(t *testing.T) inboxtest.Harness {
	raw := testenv.Require(t, testenv.MySQL)
	dsn, err := mysqlDSN(raw)
	if err != nil {
		t.Fatalf("%s: %v", testenv.MySQL.Env, err)
	}
	open := func(t testing.TB) *sql.DB {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	ping(t, open(t), testenv.MySQL)
	// Dialect left to detection, so detection is tested too.
	return inboxtest.Harness{Name: "mysql", Open: open}
}

func sqliteHarness(t *testing.T) inboxtest.Harness {
	// One file shared by the parallel checks (each on tables of its own);
	// the busy timeout makes writers wait for each other, and
	// _txlock=immediate takes the writer lock at BEGIN.
	dsn := filepath.Join(t.TempDir(), "inbox.db") + "?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	open := func(t testing.TB) *sql.DB {
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	return inboxtest.Harness{Name: "sqlite", Open: open, Dialect: inbox.SQLite}
}

func ping(t *testing.T, db *sql.DB, s testenv.Service) {
	t.Helper()
	if err := db.PingContext(context.Background()); err != nil {
		testenv.Unavailable(t, s, err)
	}
}

// mysqlDSN turns mysql://user:pass@host:port/db into the driver's DSN.
func mysqlDSN(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr = "tcp", u.Host
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	for k, v := range u.Query() {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params[k] = v[0]
	}
	return cfg.FormatDSN(), nil
}
