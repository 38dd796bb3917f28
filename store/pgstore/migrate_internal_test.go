package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// unmigratedStore is a Store on a fresh table name, nothing created yet;
// its tables are dropped when t ends.
func unmigratedStore(t *testing.T) (*pgxpool.Pool, *Store) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), testenv.Require(t, testenv.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "mig_" + hex.EncodeToString(b)
	s, err := New(pool, Config{Options: store.Options{Table: name}})
	if err != nil {
		pool.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, suffix := range []string{"", "_archive", "_migrations", "_claims", "_shards", "_relays"} {
			_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+name+suffix)
		}
		for _, suffix := range []string{"_status_t", "_topic_t", "_version_t", "_headers_t", "_type_t"} {
			_, _ = pool.Exec(context.Background(), "DROP DOMAIN IF EXISTS "+name+suffix)
		}
		pool.Close()
	})
	return pool, s
}

// A table made by the first schema version, with a row a relay of that
// version had claimed (status SENDING in the row), upgrades in place: the
// row is NEW and claimable again, the claims table exists, and the two
// partial indexes became one.
func TestMigrateFromVersion1(t *testing.T) {
	ctx := context.Background()
	pool, s := unmigratedStore(t)
	v1 := migrations(s.table, s.archive, s.claimsTable(), s.opts.Table, s.qualified)[0]
	for _, sql := range []string{
		"CREATE TABLE " + s.migrations + " (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
		v1,
		"INSERT INTO " + s.migrations + " (version) VALUES (1)",
		"INSERT INTO " + s.table + " (topic, event_key, event_type, payload, status, lease_owner, lease_epoch, lease_until) VALUES ('orders', 'k', 'T', '\\x7b7d', 'SENDING', 'old-relay', 7, now() + interval '1 hour')",
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate from version 1: %v", err)
	}
	name := s.opts.Table
	var indexes []string
	rows, err := pool.Query(ctx, "SELECT indexname FROM pg_indexes WHERE tablename = $1 ORDER BY 1", name)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		_ = rows.Scan(&n)
		indexes = append(indexes, n)
	}
	want := []string{name + "_event_id_key", name + "_parked_idx", name + "_pkey", name + "_shard_idx", name + "_waiting_idx"}
	if !slices.Equal(indexes, want) {
		t.Errorf("indexes after the upgrade: %v; want %v", indexes, want)
	}
	c, err := claimAll(ctx, s, driver.ClaimParams{Lease: driver.Lease{Owner: "new-relay", Epoch: 1}, Limit: 10, LeaseFor: time.Minute, HoldDeadKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Events) != 1 {
		t.Fatalf("the row the old relay held was not given back: claimed %d events", len(c.Events))
	}
	if rec, err := s.Get(ctx, c.Events[0].ID); err != nil || rec.Status != outbox.StatusSending || rec.LeaseOwner != "new-relay" {
		t.Errorf("Get after the claim: %+v %v; want SENDING under new-relay", rec.Status, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Errorf("Migrate again: %v", err)
	}
}

// Migration 6 upgrades a table that already holds rows breaking the
// contract without failing: the ones with an unknown status, which no claim
// reads, become DEAD with their status in the reason; the others are buried
// by the claim that takes them; new bad rows are refused at INSERT.
func TestMigrateContractOverBadRows(t *testing.T) {
	ctx := context.Background()
	pool, s := unmigratedStore(t)
	setup := append(s.schemaAt(5),
		"INSERT INTO "+s.table+" (id, topic, event_key, event_type, status) VALUES (1, 'orders', 'k1', 'T', 'FOO'), (2, 'orders', 'k2', 'T', 'new')",
		"INSERT INTO "+s.table+" (id, topic, event_key, event_type, headers) VALUES (3, 'orders', 'k3', 'T', '[1,2]')",
		"INSERT INTO "+s.table+" (id, topic, event_key, event_type, schema_version) VALUES (4, 'orders', 'k4', 'T', -1)",
		"INSERT INTO "+s.table+" (id, topic, event_key, event_type) VALUES (5, '', 'k5', 'T'), (6, 'orders', 'k1', 'T'), (7, 'orders', 'good', 'T')",
	)
	for _, sql := range setup {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	file := func() (f uint32) {
		if err := pool.QueryRow(ctx, "SELECT pg_relation_filenode($1::regclass)", s.table).Scan(&f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	before := file()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate over a table holding bad rows: %v", err)
	}
	if after := file(); after != before {
		t.Errorf("migration 6 rewrote the table (file node %d, then %d): the columns must take their domains in place", before, after)
	}
	for id, status := range map[int64]string{1: "'FOO'", 2: "'new'"} {
		r, err := s.Get(ctx, id)
		if err != nil || r.Status != outbox.StatusDead || !strings.Contains(r.LastError, "status "+status) {
			t.Errorf("Get(%d) after migration 6: %s %q %v; want DEAD naming status %s", id, r.Status, r.LastError, err, status)
		}
	}
	c, err := claimAll(ctx, s, driver.ClaimParams{Lease: driver.Lease{Owner: "relay", Epoch: 1}, Limit: 100, LeaseFor: time.Minute, HoldDeadKeys: true})
	if err != nil {
		t.Fatalf("Claim over the old bad rows: %v", err)
	}
	if len(c.Events) != 1 || c.Events[0].ID != 7 {
		t.Fatalf("claimed %v; want event 7 alone (6 is held by the DEAD event 1 of its key)", c.Events)
	}
	dead, err := s.ListDead(ctx, store.DeadQuery{})
	if err != nil || len(dead) != 5 {
		t.Fatalf("ListDead: %d records, %v; want 5 (ids 1 to 5)", len(dead), err)
	}
	for _, bad := range []string{
		"INSERT INTO " + s.table + " (topic, event_type, status) VALUES ('orders', 'T', 'FOO')",
		"INSERT INTO " + s.table + " (topic, event_type, headers) VALUES ('orders', 'T', '[1,2]')",
		"INSERT INTO " + s.table + " (topic, event_type, schema_version) VALUES ('orders', 'T', -1)",
		"INSERT INTO " + s.table + " (topic, event_type) VALUES ('', 'T')",
	} {
		if _, err := pool.Exec(ctx, bad); err == nil {
			t.Errorf("accepted after migration 6: %s", bad)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Errorf("Migrate again: %v", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// Migration 7 refuses to run while an event that earlier versions accepted
// with an empty type still waits (it would go DEAD untried), says how to
// go on, changes nothing, and runs once the events have a type.
func TestMigrateRefusesPendingEventsWithoutAType(t *testing.T) {
	ctx := context.Background()
	pool, s := unmigratedStore(t)
	setup := append(s.schemaAt(6), "INSERT INTO "+s.table+" (topic, event_key) VALUES ('orders', 'k1'), ('orders', 'k2')")
	for _, sql := range setup {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	err := s.Migrate(ctx)
	if err == nil || !strings.Contains(err.Error(), "2 pending events") || !strings.Contains(err.Error(), "SET event_type") {
		t.Fatalf("Migrate with 2 pending events of empty type: %v; want a refusal naming them and the fix", err)
	}
	var version int
	if err := pool.QueryRow(ctx, "SELECT max(version) FROM "+s.migrations).Scan(&version); err != nil || version != 6 {
		t.Fatalf("schema version after the refusal: %d, %v; want 6 (nothing changed)", version, err)
	}
	if _, err := pool.Exec(ctx, "UPDATE "+s.table+" SET event_type = 'OrderPaid' WHERE status = 'NEW' AND event_type = ''"); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate once every pending event has a type: %v", err)
	}
	c, err := claimAll(ctx, s, driver.ClaimParams{Lease: driver.Lease{Owner: "relay", Epoch: 1}, Limit: 10, LeaseFor: time.Minute})
	if err != nil || len(c.Events) != 2 {
		t.Fatalf("Claim after the upgrade: %d events, %v; want both, delivered, not buried", len(c.Events), err)
	}
}

// Migration 8 adds ownership to a table of version 7 in place (no rewrite)
// while an earlier version's relay has a claim in flight: that claim has
// no shard list, so Claim claims nothing beside it until it is
// settled, and the old relay's ack still works; then the owned claim
// takes the rest.
func TestMigrateToOwnership(t *testing.T) {
	ctx := context.Background()
	pool, s := unmigratedStore(t)
	setup := append(s.schemaAt(7),
		"INSERT INTO "+s.table+" (id, topic, event_key, event_type) SELECT g, 'orders', 'k' || (g % 3), 'T' FROM generate_series(1, 9) g",
		// ids 1 to 3 in flight under version 7: no shards column yet
		"INSERT INTO "+s.claimsTable()+" (owner, epoch, lease_until, ids, n, keys) VALUES ('old', 3, now() + interval '1 hour', '{[1,4)}', 3, '{k1,k2,k0}')",
	)
	for _, sql := range setup {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	file := func() (f uint32) {
		if err := pool.QueryRow(ctx, "SELECT pg_relation_filenode($1::regclass)", s.table).Scan(&f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	before := file()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate from version 7: %v", err)
	}
	if after := file(); after != before {
		t.Errorf("migration 8 rewrote the table (file node %d, then %d)", before, after)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	own, err := s.Balance(ctx, driver.BalanceParams{Owner: "new", LeaseFor: time.Minute})
	if err != nil || len(own.Held) != numShards {
		t.Fatalf("Balance after the upgrade: %d shards, %v; want all %d", len(own.Held), err, numShards)
	}
	req := driver.ClaimParams{Lease: driver.Lease{Owner: "new", Epoch: 1}, Limit: 100, LeaseFor: time.Minute, HoldDeadKeys: true, Shards: own.Held}
	c, err := s.Claim(ctx, req)
	if err != nil || len(c.Events) != 0 {
		t.Fatalf("Claim beside an earlier version's live claim: %d events, %v; want none (it has no shard list, so it touches every shard)", len(c.Events), err)
	}
	if err := s.AckClaim(ctx, driver.AckClaimParams{Lease: driver.Lease{Owner: "old", Epoch: 3}, N: 3}); err != nil {
		t.Fatalf("the old relay's ack after the upgrade: %v", err)
	}
	req.Lease.Epoch = 2
	c, err = s.Claim(ctx, req)
	if err != nil || len(c.Events) != 6 {
		t.Fatalf("Claim after the old claim was acked: %d events, %v; want 6", len(c.Events), err)
	}
	var shards string
	if err := pool.QueryRow(ctx, "SELECT shards::text FROM "+s.claimsTable()+" WHERE owner = 'new'").Scan(&shards); err != nil || shards == "" || shards == "{}" {
		t.Fatalf("the owned claim's shard list: %q, %v", shards, err)
	}
}

// Over a table too big to lock for an index build, migration 8 leaves its
// indexes to Migrate, which builds them with CREATE INDEX CONCURRENTLY
// after the migration's transaction; an index an interrupted build left
// invalid is dropped and built again by the next Migrate.
func TestMigrateBuildsIndexesConcurrently(t *testing.T) {
	ctx := context.Background()
	pool, s := unmigratedStore(t)
	defer func(v int64) { inTxIndexBytes = v }(inTxIndexBytes)
	inTxIndexBytes = -1 // every table is "big"
	setup := append(s.schemaAt(7), "INSERT INTO "+s.table+" (topic, event_key, event_type) SELECT 'orders', 'k' || (g % 7), 'T' FROM generate_series(1, 1000) g")
	for _, sql := range setup {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	valid := func() map[string]bool {
		rows, err := pool.Query(ctx, "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::regclass", s.table)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]bool{}
		for rows.Next() {
			var n string
			var ok bool
			_ = rows.Scan(&n, &ok)
			out[n] = ok
		}
		return out
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	name := s.opts.Table
	if v := valid(); !v[name+"_shard_idx"] || !v[name+"_parked_idx"] {
		t.Fatalf("indexes after Migrate of a big table: %v; want the shard and parked indexes, valid", v)
	}
	// As an interrupted CREATE INDEX CONCURRENTLY leaves it.
	if _, err := pool.Exec(ctx, "UPDATE pg_index SET indisvalid = false WHERE indexrelid = $1::regclass", s.qualified(name+"_shard_idx")); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate over an invalid index: %v", err)
	}
	if v := valid(); !v[name+"_shard_idx"] {
		t.Fatalf("the invalid shard index was not rebuilt: %v", v)
	}
	own, err := s.Balance(ctx, driver.BalanceParams{Owner: "a", LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Claim(ctx, driver.ClaimParams{Lease: driver.Lease{Owner: "a", Epoch: 1}, Limit: 2000, LeaseFor: time.Minute, Shards: own.Held})
	if err != nil || len(c.Events) != 1000 {
		t.Fatalf("Claim after the concurrent builds: %d events, %v; want 1000", len(c.Events), err)
	}
}

// schemaAt returns the statements that build s's schema as version v left
// it (migrations 1 to v, recorded), for upgrade tests.
func (s *Store) schemaAt(v int) []string {
	all := migrations(s.table, s.archive, s.claimsTable(), s.opts.Table, s.qualified)
	out := []string{"CREATE TABLE " + s.migrations + " (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"}
	for i := 1; i <= v; i++ {
		out = append(out, all[i-1], "INSERT INTO "+s.migrations+" (version) VALUES ("+itoa(i)+")")
	}
	return out
}

// claimAll claims from every shard as req.Lease.Owner, the only relay.
func claimAll(ctx context.Context, s *Store, req driver.ClaimParams) (driver.Claim, error) {
	own, err := s.Balance(ctx, driver.BalanceParams{Owner: req.Lease.Owner, LeaseFor: time.Minute, HoldDeadKeys: req.HoldDeadKeys})
	if err != nil {
		return driver.Claim{}, err
	}
	req.Shards = own.Held
	return s.Claim(ctx, req)
}
