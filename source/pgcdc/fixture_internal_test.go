package pgcdc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/pgstore"
)

// internalFixture opens the test PostgreSQL and a migrated outbox table
// named prefix and random hex, for the internal tests; everything a
// Source of cfg may have created there (its slot, publication and
// tables) is dropped when the test ends. ctx ends after a minute.
func internalFixture(t *testing.T, prefix string) (ctx context.Context, pool *pgxpool.Pool, table string, drop func(cfg Config)) {
	t.Helper()
	url := testenv.Require(t, testenv.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after the drops (cleanups run last first)
	if err := pool.Ping(ctx); err != nil {
		testenv.Unavailable(t, testenv.Postgres, err)
	}
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	table = prefix + hex.EncodeToString(b)
	st, err := pgstore.New(pool, pgstore.Config{Options: store.Options{Table: table}, DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	drop = func(cfg Config) {
		t.Cleanup(func() {
			ctx := context.Background()
			for range 50 {
				si, err := readSlot(ctx, pool, cfg.Slot)
				if err != nil || !si.exists {
					break
				}
				if si.active {
					_, _ = pool.Exec(ctx, "SELECT pg_terminate_backend($1)", si.activePID)
					time.Sleep(100 * time.Millisecond)
					continue
				}
				_, _ = pool.Exec(ctx, "SELECT pg_drop_replication_slot($1)", cfg.Slot)
			}
			_, _ = pool.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{cfg.Publication}.Sanitize())
			for _, suffix := range []string{"", "_cdc", "_dead", "_archive", "_claims", "_migrations", "_relays", "_shards"} {
				_, _ = pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{table + suffix}.Sanitize()+" CASCADE")
			}
		})
	}
	return ctx, pool, table, drop
}
