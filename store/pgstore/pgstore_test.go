package pgstore_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/pgstore"
	"github.com/outbox-go/outbox/store/storetest"
)

// openPool connects to the test server, or fails (CI) / skips (locally).
func openPool(t testing.TB) (*pgxpool.Pool, *sql.DB) {
	t.Helper()
	url := testenv.Require(t, testenv.Postgres)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		testenv.Unavailable(t, testenv.Postgres, err)
	}
	if err := pool.Ping(context.Background()); err != nil {
		pool.Close()
		testenv.Unavailable(t, testenv.Postgres, err)
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(); pool.Close() })
	return pool, db
}

// domainSuffixes name the domains Migrate creates for a table's columns;
// dropping the table leaves them behind.
var domainSuffixes = []string{"_status_t", "_topic_t", "_version_t", "_headers_t", "_type_t", "_created_t", "_next_t"}

func uniqueTable(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func dropTables(t testing.TB, pool *pgxpool.Pool, opts store.Options) {
	t.Helper()
	t.Cleanup(func() {
		for _, suffix := range []string{"", "_archive", "_migrations", "_claims", "_shards", "_relays"} {
			_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{opts.Table + suffix}.Sanitize())
		}
		for _, suffix := range domainSuffixes {
			_, _ = pool.Exec(context.Background(), "DROP DOMAIN IF EXISTS "+pgx.Identifier{opts.Table + suffix}.Sanitize())
		}
	})
}

// migratedStore is a Store over pool on a fresh table named prefix+random
// (cfg.Options.Table is set here), migrated, and that name; the tables are
// dropped and the Store closed when tb ends.
func migratedStore(tb testing.TB, pool *pgxpool.Pool, prefix string, cfg pgstore.Config) (*pgstore.Store, string) {
	tb.Helper()
	cfg.Options.Table = uniqueTable(prefix)
	st, err := pgstore.New(pool, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	dropTables(tb, pool, cfg.Options)
	tb.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return st, cfg.Options.Table
}

func TestConformance(t *testing.T) {
	pool, db := openPool(t)
	storetest.Run(t, storetest.Harness{
		Name:          "postgres",
		ClaimedStatus: outbox.StatusNew, // claims live in <table>_claims
		ClaimReads: func(ctx context.Context, st driver.Store, req driver.ClaimParams) (driver.Claim, int64, error) {
			return st.(*pgstore.Store).ClaimOwnedReads(ctx, req)
		},
		New: func(opts store.Options) (driver.Store, error) {
			return pgstore.New(pool, pgstore.Config{Options: opts})
		},
		Loosen: func(t *testing.T, fx storetest.Fixture) {
			// the table's domains without their constraints, as a
			// table of another shape may have them
			parts := strings.Split(fx.Table, ".")
			table := strings.Trim(parts[len(parts)-1], `"`)
			rows, err := pool.Query(t.Context(), "SELECT t.typname, c.conname FROM pg_constraint c JOIN pg_type t ON t.oid = c.contypid WHERE t.typname = ANY($1)", pgstore.DomainNames(table))
			if err != nil {
				t.Fatal(err)
			}
			type con struct{ Domain, Name string }
			cons, err := pgx.CollectRows(rows, pgx.RowToStructByPos[con])
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cons {
				if _, err := pool.Exec(t.Context(), "ALTER DOMAIN "+pgx.Identifier{c.Domain}.Sanitize()+" DROP CONSTRAINT "+pgx.Identifier{c.Name}.Sanitize()); err != nil {
					t.Fatal(err)
				}
			}
		},
		Open: func(t *testing.T, opts store.Options) storetest.Fixture {
			st, err := pgstore.New(pool, pgstore.Config{Options: opts})
			if err != nil {
				t.Fatal(err)
			}
			dropTables(t, pool, opts)
			t.Cleanup(func() { st.Close() })
			return storetest.Fixture{
				Store:       st,
				DB:          db,
				Table:       st.Table(),
				Placeholder: func(n int) string { return "$" + itoa(n) },
			}
		},
	})
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// A claim that meets only rows of a held key parks them and runs again at
// once: behind 3,000 rows of a key whose first event is DEAD, one
// Claim of 1,000 returns the other keys' events, not an empty claim
// that a relay would take for "caught up".
func TestClaimOwnedParksThenClaims(t *testing.T) {
	pool, _ := openPool(t)
	ctx := context.Background()
	st, table := migratedStore(t, pool, "own_", pgstore.Config{})
	own, err := st.Balance(ctx, driver.BalanceParams{Owner: "a", LeaseFor: time.Minute, HoldDeadKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(epoch int64) driver.Claim {
		t.Helper()
		c, err := st.Claim(ctx, driver.ClaimParams{Lease: driver.Lease{Owner: "a", Epoch: epoch}, Limit: 1000, LeaseFor: time.Minute, HoldDeadKeys: true, Shards: own.Held})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if err := st.Enqueue(ctx, outbox.Message{Topic: "orders", Key: "HOT", Type: "Head", Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	c := claim(1)
	if err := st.Bury(ctx, driver.BuryParams{Lease: c.Lease, Burials: []driver.Burial{{ID: c.Events[0].ID, Error: "poison"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+table+" (topic, event_key, event_type) SELECT 'orders', 'HOT', 'T' FROM generate_series(1, 3000)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+table+" (topic, event_key, event_type) SELECT 'orders', 'k' || g, 'Other' FROM generate_series(1, 5) g"); err != nil {
		t.Fatal(err)
	}
	c = claim(2)
	if len(c.Events) != 5 {
		t.Fatalf("Claim behind 3,000 held rows returned %d events; want the 5 of other keys", len(c.Events))
	}
	var parked int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE parked").Scan(&parked); err != nil || parked != 3000 {
		t.Fatalf("%d rows parked (%v); want 3000", parked, err)
	}
}

// claimAll claims from every shard as req.Lease.Owner, the only relay.
func claimAll(t testing.TB, st *pgstore.Store, req driver.ClaimParams) driver.Claim {
	t.Helper()
	ctx := context.Background()
	own, err := st.Balance(ctx, driver.BalanceParams{Owner: req.Lease.Owner, LeaseFor: time.Minute, HoldDeadKeys: req.HoldDeadKeys})
	if err != nil {
		t.Fatal(err)
	}
	req.Shards = own.Held
	c, err := st.Claim(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
