package binlog_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/source/binlog"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/mysqlstore"
)

// fixture is a fresh outbox table on the test MariaDB, with the means to
// start sources on it; its tables are dropped when the test ends.
type fixture struct {
	t     testing.TB
	db    *sql.DB
	conn  *mysql.Config
	store *mysqlstore.Store
	cfg   binlog.Config
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	url := testenv.Require(t, testenv.MySQL)
	dsn, err := mysqlstore.DSN(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		testenv.Unavailable(t, testenv.MySQL, err)
	}
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	table := "bl" + hex.EncodeToString(b)
	st, err := mysqlstore.New(db, mysqlstore.Config{Options: store.Options{Table: table}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, suffix := range []string{"", "_binlog", "_archive", "_migrations", "_relays", "_claims", "_shards"} {
			_, _ = db.Exec("DROP TABLE IF EXISTS `" + table + suffix + "`")
		}
	})
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, db: db, conn: conn, store: st, cfg: binlog.Config{Table: table, LeaseFor: 4 * time.Second}}
}

// start starts a source on the fixture's table, closed when the test ends.
func (f *fixture) start(t testing.TB, cfg binlog.Config) *binlog.Source {
	t.Helper()
	src, err := binlog.New(f.db, f.conn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

func (f *fixture) exec(q string, args ...any) {
	f.t.Helper()
	if _, err := f.db.Exec(q, args...); err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
}

func (f *fixture) count(where string) int {
	f.t.Helper()
	var n int
	if err := f.db.QueryRow(fmt.Sprintf("SELECT COUNT(*) FROM `%s` WHERE %s", f.cfg.Table, where)).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}
