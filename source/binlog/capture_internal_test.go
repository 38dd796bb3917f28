package binlog

import (
	"context"
	"database/sql"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/mysqlstore"
)

var capture = flag.Bool("capture", false, "rewrite testdata/*.bin from the local MariaDB (go test -run TestCaptured -capture)")

// captureTable is the outbox table the captures write to (created by
// mysqlstore's Migrate, dropped after).
const captureTable = "binlog_capture"

// captureScenario runs the statements of testdata/<name>.sql (one per
// line; lines starting with -- are comments) on one connection and writes
// the binlog events they produced, from a fresh dump's fake rotate and
// format description on, to testdata/<name>.bin.
func captureScenario(t *testing.T, name string) {
	t.Helper()
	url := testenv.Require(t, testenv.MySQL)
	dsn, err := mysqlstore.DSN(url)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+captureTable+", "+captureTable+"_archive, "+captureTable+"_migrations, "+captureTable+"_relays, "+captureTable+"_claims, "+captureTable+"_shards"); err != nil {
		t.Fatal(err)
	}
	st, err := mysqlstore.New(db, mysqlstore.Config{Options: store.Options{Table: captureTable}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join("testdata", name+".sql"))
	if err != nil {
		t.Fatal(err)
	}
	sess, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	var file string
	var pos uint32
	var doDB, ignoreDB any
	if err := sess.QueryRowContext(ctx, "SHOW MASTER STATUS").Scan(&file, &pos, &doDB, &ignoreDB); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(script), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "--") {
			continue
		}
		if _, err := sess.ExecContext(ctx, line); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dial(ctx, dialConfig{Net: cfg.Net, Addr: cfg.Addr, User: cfg.User, Passwd: cfg.Passwd, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.startDump(4242, dumpFrom{File: file, Pos: pos}, time.Second, true); err != nil {
		t.Fatal(err)
	}
	var out []byte
	for {
		ev, err := c.readEvent()
		if err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatal(err)
		}
		out = append(out, ev...)
	}
	if err := os.WriteFile(filepath.Join("testdata", name+".bin"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+captureTable+", "+captureTable+"_archive, "+captureTable+"_migrations, "+captureTable+"_relays")
}
