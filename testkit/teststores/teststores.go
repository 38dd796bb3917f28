// Package teststores opens each store kind over a fresh table for tests of
// the packages above the store seam (relay, CLI, torture). The tables are
// dropped when the test ends. PostgreSQL and MariaDB come from
// internal/testenv (fail under CI, skip locally); SQLite uses a temp file.
package teststores

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/mysqlstore"
	"github.com/outbox-go/outbox/store/pgstore"
	"github.com/outbox-go/outbox/store/sqlitestore"
)

// Kinds are the store kinds, in the order tests run them.
var Kinds = []string{"postgres", "mysql", "sqlite"}

// Opened is a migrated store over a fresh table.
type Opened struct {
	Store driver.Store
	URL   string        // the --db URL of the same database
	Opts  store.Options // Table is the fresh name
	DB    *sql.DB       // the same database through database/sql, for the caller's transactions
}

// UniqueTable returns prefix plus 8 random hex digits.
func UniqueTable(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// URL returns the database URL for kind, checking the server answers.
// For sqlite it is a new file under t.TempDir().
func URL(t testing.TB, kind string) string {
	t.Helper()
	switch kind {
	case "postgres":
		return testenv.Require(t, testenv.Postgres)
	case "mysql":
		return testenv.Require(t, testenv.MySQL)
	case "sqlite":
		return "sqlite:" + filepath.Join(t.TempDir(), "outbox.db")
	}
	t.Fatalf("teststores: unknown kind %q", kind)
	return ""
}

// Open opens kind with opts (Table defaults to a fresh name), migrates, and
// drops the tables when t ends.
func Open(t testing.TB, kind string, opts store.Options) Opened {
	t.Helper()
	return OpenAt(t, kind, URL(t, kind), opts)
}

// OpenAt is Open on a given database URL (from URL).
func OpenAt(t testing.TB, kind, url string, opts store.Options) Opened {
	t.Helper()
	if opts.Table == "" {
		opts.Table = UniqueTable("rt_")
	}
	ctx := context.Background()
	var (
		st  driver.Store
		err error
	)
	switch kind {
	case "postgres":
		dropLeakedSlots(t, url)
		st, err = pgstore.Open(ctx, url, pgstore.Config{Options: opts})
	case "mysql":
		st, err = mysqlstore.Open(ctx, url, mysqlstore.Config{Options: opts})
	case "sqlite":
		st, err = sqlitestore.Open(ctx, url, sqlitestore.Config{Options: opts})
	}
	if err != nil {
		t.Fatalf("teststores: open %s: %v", kind, err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("teststores: migrate %s: %v", kind, err)
	}
	db := SQLDB(t, kind, url)
	t.Cleanup(func() {
		st.Close()
		Drop(t, kind, url, opts.Table)
	})
	return Opened{Store: st, URL: url, Opts: opts, DB: db}
}

// SQLDB opens url through database/sql with the driver each store expects
// for EnqueueTx; it is closed when t ends.
func SQLDB(t testing.TB, kind, url string) *sql.DB {
	t.Helper()
	driver, dsn, err := driverDSN(kind, url)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func driverDSN(kind, url string) (driver, dsn string, err error) {
	switch kind {
	case "postgres":
		return "pgx", url, nil
	case "mysql":
		dsn, err = mysqlstore.DSN(url)
		return "mysql", dsn, err
	default:
		dsn, err = sqlitestore.DSN(url)
		return "sqlite", dsn, err
	}
}

// Drop removes the outbox tables named table (and their archive and
// migration tables, and on PostgreSQL their columns' domains) from a server
// database. SQLite files vanish with
// t.TempDir().
func Drop(t testing.TB, kind, url, table string) {
	if kind == "sqlite" {
		return
	}
	driver, dsn, err := driverDSN(kind, url)
	if err != nil {
		return
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return
	}
	defer db.Close()
	for _, suffix := range []string{"", "_archive", "_migrations", "_claims", "_shards", "_relays", "_lock"} {
		_, _ = db.Exec("DROP TABLE IF EXISTS " + table + suffix)
	}
	if kind == "postgres" { // the domains of the table's columns outlive it
		for _, d := range pgstore.DomainNames(table) {
			_, _ = db.Exec("DROP DOMAIN IF EXISTS " + d)
		}
	}
}

// leakedSlotsOnce runs dropLeakedSlots once per test process.
var leakedSlotsOnce sync.Once

// dropLeakedSlots drops the logical replication slots that a test process
// killed before its cleanup (a timeout, a SIGKILL) left on the test
// database: inactive, named outbox_<table> as the CDC relay names them,
// for a table none of whose tables (<table>, <table>_cdc, <table>_dead)
// exists any more. Such a slot holds back the vacuum of the system
// catalogs (its catalog_xmin) while tests create and drop tables by the
// thousand: measured here with two of them, pg_attribute grew 271,000 dead
// rows (61 MB) and PostgreSQL's CPU for the same load doubled. Slots of
// tests running now keep their tables, so they stay.
func dropLeakedSlots(t testing.TB, url string) {
	leakedSlotsOnce.Do(func() {
		db, err := sql.Open("pgx", url)
		if err != nil {
			return
		}
		defer db.Close()
		_, err = db.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
WHERE NOT active AND slot_type = 'logical' AND database = current_database() AND slot_name LIKE 'outbox\_%'
AND to_regclass(quote_ident(substr(slot_name, 8))) IS NULL
AND to_regclass(quote_ident(substr(slot_name, 8) || '_cdc')) IS NULL
AND to_regclass(quote_ident(substr(slot_name, 8) || '_dead')) IS NULL`)
		if err != nil {
			t.Logf("teststores: dropping leaked replication slots: %v", err)
		}
	})
}

// Claim claims from every shard of st's table as req.Lease.Owner, a relay
// alone on the table (TryClaim), and fails t on an error.
func Claim(t testing.TB, st driver.Store, req driver.ClaimParams) driver.Claim {
	t.Helper()
	c, err := TryClaim(context.Background(), st, req)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TryClaim claims from every shard of st's table as req.Lease.Owner, a
// relay alone on the table: Balance, then Claim from the shards it
// holds.
func TryClaim(ctx context.Context, st driver.Store, req driver.ClaimParams) (driver.Claim, error) {
	own, err := st.Balance(ctx, driver.BalanceParams{Owner: req.Lease.Owner, LeaseFor: time.Minute, HoldDeadKeys: req.HoldDeadKeys})
	if err != nil {
		return driver.Claim{}, fmt.Errorf("balance as %q: %w", req.Lease.Owner, err)
	}
	req.Shards = own.Held
	c, err := st.Claim(ctx, req)
	if err != nil {
		return driver.Claim{}, fmt.Errorf("claim as %q: %w", req.Lease.Owner, err)
	}
	return c, nil
}
