package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/store"
)

// A table made by the first schema version, with a row a relay of that
// version had claimed (status SENDING in the row), upgrades in place: the
// row is NEW and claimable again, the claims table exists, and the two
// partial indexes became one.
func TestMigrateFromVersion1(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testenv.Require(t, testenv.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "mig_" + hex.EncodeToString(b)
	s, err := New(pool, Config{Options: store.Options{Table: name}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, suffix := range []string{"", "_archive", "_migrations", "_claims"} {
			_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+name+suffix)
		}
	})
	v1 := migrations(s.table, s.archive, s.claimsTable(), s.opts.Table, s.qualified)[0]
	for _, sql := range []string{
		"CREATE TABLE " + s.migrations + " (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
		v1,
		"INSERT INTO " + s.migrations + " (version) VALUES (1)",
		"INSERT INTO " + s.table + " (topic, event_key, payload, status, lease_owner, lease_epoch, lease_until) VALUES ('orders', 'k', '\\x7b7d', 'SENDING', 'old-relay', 7, now() + interval '1 hour')",
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate from version 1: %v", err)
	}
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
	want := []string{name + "_event_id_key", name + "_pkey", name + "_waiting_idx"}
	if len(indexes) != len(want) || indexes[0] != want[0] || indexes[1] != want[1] || indexes[2] != want[2] {
		t.Errorf("indexes after the upgrade: %v; want %v", indexes, want)
	}
	c, err := s.Claim(ctx, store.ClaimRequest{Lease: store.Lease{Owner: "new-relay", Epoch: 1}, Limit: 10, LeaseFor: time.Minute, HoldDeadKeys: true})
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
