package mysqlstore_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/mysqlstore"
)

// TestMigrateRelayLeases: migration 3 upgrades a table of schema version
// 2 in place, keeping the relay rows written before it (they record no
// lease, and keep the retention of earlier versions); a heartbeat before
// the upgrade fails saying to migrate; afterwards heartbeats record their
// lease, an earlier version's heartbeat statement still works beside
// them, and a migration interrupted after its ALTER runs again.
func TestMigrateRelayLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openStore(t).DB()
	table := uniqueTable("mig_")
	dropTables(t, db, table)
	st, err := mysqlstore.New(db, mysqlstore.Config{Options: store.Options{Table: table}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := mysqlstore.MigrateTo(ctx, st, 2); err != nil {
		t.Fatal(err)
	}
	relays := "`" + table + "_relays`"
	// A relay of version 2 heartbeats (its statement, verbatim).
	oldBeat := "INSERT INTO " + relays + " (owner, lease_until) VALUES (?, UNIX_TIMESTAMP(NOW(6)) * 1000000 + 60000000) ON DUPLICATE KEY UPDATE lease_until = VALUES(lease_until)"
	if _, err := db.ExecContext(ctx, oldBeat, "old"); err != nil {
		t.Fatal(err)
	}
	leaseFor := func(owner string) sql.NullInt64 {
		t.Helper()
		var v sql.NullInt64
		if err := db.QueryRowContext(ctx, "SELECT lease_for FROM "+relays+" WHERE owner = ?", owner).Scan(&v); err != nil {
			t.Fatalf("lease_for of relay %s: %v", owner, err)
		}
		return v
	}
	version := func() int {
		t.Helper()
		var v int
		if err := db.QueryRowContext(ctx, "SELECT MAX(version) FROM `"+table+"_migrations`").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := version(); v != 2 {
		t.Fatalf("schema version %d after migrating to 2", v)
	}
	_, err = st.Balance(ctx, driver.BalanceParams{Owner: "new", LeaseFor: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "outbox migrate") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("a heartbeat on a table of version 2: %v; want one line saying to run outbox migrate", err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("Migrate from version 2: %v", err)
	}
	if v := version(); v != 3 {
		t.Fatalf("schema version %d after Migrate, want 3", v)
	}
	if v := leaseFor("old"); v.Valid {
		t.Fatalf("the row written before the upgrade records a lease of %dµs; want none", v.Int64)
	}
	if _, err := st.Balance(ctx, driver.BalanceParams{Owner: "new", LeaseFor: 45 * time.Second}); err != nil {
		t.Fatalf("a heartbeat after the upgrade: %v", err)
	}
	if v := leaseFor("new"); !v.Valid || v.Int64 != (45*time.Second).Microseconds() {
		t.Fatalf("relay new's row records lease %v; want %dµs", v, (45 * time.Second).Microseconds())
	}
	if _, err := db.ExecContext(ctx, oldBeat, "old"); err != nil {
		t.Fatalf("a version 2 relay's heartbeat on the upgraded table: %v", err)
	}
	// The row of no lease, ended 11 min ago, is judged by the heartbeat's
	// lease as before: kept under a 30 min lease, deleted under a 1 min one.
	if _, err := db.ExecContext(ctx, "UPDATE "+relays+" SET lease_until = UNIX_TIMESTAMP(NOW(6)) * 1000000 - ? WHERE owner = 'old'", (11 * time.Minute).Microseconds()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Balance(ctx, driver.BalanceParams{Owner: "new", LeaseFor: 30 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+relays+" WHERE owner = 'old'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("a 30 min heartbeat deleted the lease-less row ended 11 min ago (%d rows, %v)", n, err)
	}
	if _, err := st.Balance(ctx, driver.BalanceParams{Owner: "new", LeaseFor: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+relays+" WHERE owner = 'old'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("a 1 min heartbeat kept the lease-less row ended 11 min ago (%d rows, %v)", n, err)
	}

	// Interrupted after the ALTER (the column exists, version 3 is not
	// recorded): Migrate runs again and skips the ALTER.
	if _, err := db.ExecContext(ctx, "DELETE FROM `"+table+"_migrations` WHERE version = 3"); err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after an interrupted migration 3: %v", err)
	}
	if v := version(); v != 3 {
		t.Fatalf("schema version %d after re-running migration 3, want 3", v)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
}
