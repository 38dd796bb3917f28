package pgcdc_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox/source/pgcdc"
)

// Relays that start together run Setup together: none may fail on a
// creation another one made at the same moment.
func TestSetupConcurrent(t *testing.T) {
	for _, tableLess := range []bool{false, true} {
		for round := 0; round < 5; round++ {
			f := newFixture(t, tableLess)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			var wg sync.WaitGroup
			errs := make([]error, 6)
			for i := range errs {
				wg.Add(1)
				go func() { defer wg.Done(); errs[i] = pgcdc.Setup(ctx, f.pool, f.cfg) }()
			}
			wg.Wait()
			cancel()
			for i, err := range errs {
				if err != nil {
					t.Errorf("table-less %v, round %d, Setup %d: %v", tableLess, round, i, err)
				}
			}
		}
	}
}

// stateTable is the fixture's sanitized <table>_cdc.
func (f *fixture) stateTable() string { return pgx.Identifier{f.cfg.Table + "_cdc"}.Sanitize() }

// Setup takes no lock on an existing state table: a
// transaction that holds a row of it (as a long report query might) does
// not make Setup queue, and so does not queue the lease renewals behind
// Setup either.
func TestSetupDoesNotLockUpToDateStateTable(t *testing.T) {
	f := newFixture(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pgcdc.Setup(ctx, f.pool, f.cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, "INSERT INTO "+f.stateTable()+" (slot) VALUES ('x')"); err != nil {
		t.Fatal(err)
	}
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "SELECT * FROM "+f.stateTable()+" FOR SHARE"); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
	defer scancel()
	if err := pgcdc.Setup(sctx, f.pool, f.cfg); err != nil {
		t.Fatalf("Setup behind a FOR SHARE row lock on the up-to-date state table: %v", err)
	}
}
