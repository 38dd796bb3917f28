package binlog_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/source/binlog"
)

// A user with a password: refused without the replication grants, naming
// them; with them, the replication connection authenticates
// (mysql_native_password) and streams; a wrong password is refused.
func TestPasswordUserAndGrants(t *testing.T) {
	f := newFixture(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	user, pass := "bl_"+hex.EncodeToString(b), "pw-"+hex.EncodeToString(b)+"'\\x"
	f.exec("CREATE USER '"+user+"'@'%' IDENTIFIED BY ?", pass)
	t.Cleanup(func() { _, _ = f.db.Exec("DROP USER '" + user + "'@'%'") })
	f.exec("GRANT ALL PRIVILEGES ON `" + f.conn.DBName + "`.* TO '" + user + "'@'%'")
	conn := f.conn.Clone()
	conn.User, conn.Passwd = user, pass
	db, err := sql.Open("mysql", conn.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	start := func(conn *mysql.Config) (*binlog.Source, error) {
		src, err := binlog.New(db, conn, f.cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := src.Start(ctx); err != nil {
			return nil, err
		}
		t.Cleanup(func() { src.Close() })
		return src, nil
	}
	if _, err := start(conn); err == nil || !strings.Contains(err.Error(), "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.*") {
		t.Fatalf("Start without the replication grants: %v; want the GRANT to run", err)
	}
	f.exec("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '" + user + "'@'%'")
	src, err := start(conn)
	if err != nil {
		t.Fatal(err)
	}
	committed, _ := produce(t, f, 2, nil)
	collect(src).until(t, 30*time.Second, committed...)
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	bad := conn.Clone()
	bad.Passwd = "wrong"
	var streamErr error
	src, err = binlog.New(db, bad, binlog.Config{Table: f.cfg.Table, LeaseFor: f.cfg.LeaseFor, Logger: nil})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	_, streamErr = src.Next(ctx)
	if streamErr == nil || !strings.Contains(streamErr.Error(), "Access denied") {
		t.Fatalf("streaming with a wrong password: %v; want the server's Access denied", streamErr)
	}
}

// A row that breaks the table contract (written with plain SQL) is buried
// DEAD with the reason; the rows after it are delivered.
func TestBadRowBuried(t *testing.T) {
	f := newFixture(t)
	src := f.start(t, f.cfg)
	f.exec("INSERT INTO `" + f.cfg.Table + "` (topic, event_type, payload) VALUES ('orders', '', 'x')")
	good := outbox.Message{EventID: outbox.NewEventID(), Topic: "orders", Type: "Fine", Payload: []byte("y")}
	if err := f.store.Enqueue(context.Background(), good); err != nil {
		t.Fatal(err)
	}
	c := collect(src)
	c.until(t, 30*time.Second, good.EventID)
	var reason string
	if err := f.db.QueryRow("SELECT last_error FROM `" + f.cfg.Table + "` WHERE status = 'DEAD'").Scan(&reason); err != nil {
		t.Fatalf("the bad row is not DEAD: %v", err)
	}
	if !strings.Contains(reason, "event_type is empty") {
		t.Fatalf("the bad row's reason: %q", reason)
	}
}

// A table without a column of the contract is refused at start, naming the
// fix.
func TestMissingColumnRefused(t *testing.T) {
	f := newFixture(t)
	f.exec("ALTER TABLE `" + f.cfg.Table + "` DROP COLUMN aggregate_type")
	src, err := binlog.New(f.db, f.conn, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := src.Start(ctx); err == nil || !strings.Contains(err.Error(), "no column aggregate_type") || !strings.Contains(err.Error(), "outbox migrate") {
		t.Fatalf("Start on a table without aggregate_type: %v; want a refusal naming the column and `outbox migrate`", err)
	}
}

// Without binlog_row_metadata=FULL the binlog carries no column names: the
// source maps the columns by the table's definition, and reads it again
// (with the table) after the table changed.
func TestWithoutColumnNames(t *testing.T) {
	f := newFixture(t)
	f.exec("SET GLOBAL binlog_row_metadata = 'MINIMAL'")
	t.Cleanup(func() { _, _ = f.db.Exec("SET GLOBAL binlog_row_metadata = 'FULL'") })
	src := f.start(t, f.cfg)
	c := collect(src)
	before, _ := produce(t, f, 3, nil)
	c.until(t, 30*time.Second, before...)
	f.exec("ALTER TABLE `" + f.cfg.Table + "` ADD COLUMN note VARCHAR(20) NULL AFTER id")
	after, _ := produce(t, f, 3, nil)
	c.until(t, 30*time.Second, after...)
	for _, id := range after {
		if c.seen[id] == 0 {
			t.Fatal("an event written after the ALTER was not read")
		}
	}
	if c.last.Type != "Made" || len(c.last.Payload) == 0 {
		t.Fatalf("the last event read by the new definition: %+v", c.last)
	}
}
