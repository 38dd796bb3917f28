package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// testMigrateIdempotent: Migrate three times, then again with data in the
// table; the data survives.
func (s *suite) testMigrateIdempotent(t *testing.T) {
	fx := s.open(t, store.Options{})
	for i := range 3 {
		if err := fx.Store.Migrate(t.Context()); err != nil {
			t.Fatalf("Migrate call %d of 3: %v (Migrate must be idempotent)", i+1, err)
		}
	}
	enqueue(t, fx, msg("before-remigrate", ""))
	if err := fx.Store.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate over a table holding events: %v", err)
	}
	c := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "claim after re-running Migrate (Migrate must keep existing events)", c.Events, "before-remigrate")
}

// testMigrateConcurrent: five stores migrate one fresh table at once.
func (s *suite) testMigrateConcurrent(t *testing.T) {
	opts := store.Options{Table: newTableName()}
	fx := s.open(t, opts)
	stores := []driver.Store{fx.Store}
	for range 4 {
		st, err := s.h.New(opts)
		if err != nil {
			t.Fatalf("New(%+v): %v", opts, err)
		}
		t.Cleanup(func() { _ = st.Close() })
		stores = append(stores, st)
	}
	start := make(chan struct{})
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for i, st := range stores {
		wg.Go(func() {
			<-start
			errs[i] = st.Migrate(t.Context())
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Migrate %d of %d running at the same time on one fresh table: %v (Migrate must be safe when several processes migrate at once)", i+1, len(stores), err)
		}
	}
	if t.Failed() {
		return
	}
	if err := stores[len(stores)-1].Enqueue(t.Context(), msg("after-concurrent-migrate", "")); err != nil {
		t.Fatalf("Enqueue after concurrent Migrate: %v", err)
	}
	c := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "claim after concurrent Migrate", c.Events, "after-concurrent-migrate")
}

// testInvalidNames: hostile or invalid table and schema names are refused
// with store.ErrInvalidName by New or, at the latest, by Migrate, and an
// injection aimed at a real table leaves it alone.
func (s *suite) testInvalidNames(t *testing.T) {
	victimOpts := store.Options{Table: newTableName()}
	victim := s.migrated(t, victimOpts)
	enqueue(t, victim, msg("survivor", ""))
	v := victimOpts.Table
	cases := []struct {
		why  string
		opts store.Options
	}{
		{"SQL injection with a double quote", store.Options{Table: `a"; DROP TABLE x; --`}},
		{"SQL injection with a backtick", store.Options{Table: "a`; DROP TABLE x; --"}},
		{"SQL injection with a single quote", store.Options{Table: `a'; DROP TABLE x; --`}},
		{"SQL injection aimed at a real table", store.Options{Table: fmt.Sprintf(`%s"; DROP TABLE %s; --`, v, v)}},
		{"SQL injection aimed at a real table (backtick)", store.Options{Table: fmt.Sprintf("%s`; DROP TABLE %s; --", v, v)}},
		{"upper case", store.Options{Table: "Outbox"}},
		{"starts with a digit", store.Options{Table: "1outbox"}},
		{"hyphen", store.Options{Table: "out-box"}},
		{"dot", store.Options{Table: "public.outbox"}},
		{"64 characters", store.Options{Table: strings.Repeat("a", 64)}},
		{"51 characters (the derived _migrations name would not fit)", store.Options{Table: strings.Repeat("a", 51)}},
		{"non-ASCII", store.Options{Table: "订单"}},
		{"schema with SQL injection", store.Options{Table: newTableName(), Schema: `public"; DROP TABLE x; --`}},
		{"schema in upper case", store.Options{Table: newTableName(), Schema: "Public"}},
	}
	for _, tc := range cases {
		st, err := s.h.New(tc.opts)
		if err != nil {
			if !errors.Is(err, store.ErrInvalidName) {
				t.Errorf("New with %s (table %q, schema %q): %v; want an error matching store.ErrInvalidName", tc.why, tc.opts.Table, tc.opts.Schema, err)
			}
			continue
		}
		err = st.Migrate(t.Context())
		if !errors.Is(err, store.ErrInvalidName) {
			t.Errorf("New accepted %s (table %q, schema %q) and Migrate returned %v; want an error matching store.ErrInvalidName from New or Migrate", tc.why, tc.opts.Table, tc.opts.Schema, err)
		}
		if _, err := st.Stats(t.Context()); !errors.Is(err, store.ErrInvalidName) {
			t.Errorf("New accepted %s (table %q) and Stats returned %v; want store.ErrInvalidName", tc.why, tc.opts.Table, err)
		}
		if _, err := tryClaim(t.Context(), st, req(s.lease("relay"), 1)); !errors.Is(err, store.ErrInvalidName) {
			t.Errorf("New accepted %s (table %q) and Claim returned %v; want store.ErrInvalidName", tc.why, tc.opts.Table, err)
		}
		if err := st.Enqueue(t.Context(), msg("x", "")); !errors.Is(err, store.ErrInvalidName) {
			t.Errorf("New accepted %s (table %q) and Enqueue returned %v; want store.ErrInvalidName", tc.why, tc.opts.Table, err)
		}
		_ = st.Close()
	}
	c, err := tryClaim(t.Context(), victim.Store, req(s.lease("relay"), 10))
	if err != nil {
		t.Fatalf("the table %s named in the injection attempts is no longer usable: Claim: %v", victim.Table, err)
	}
	wantLabels(t, "claim on the table named in the injection attempts", c.Events, "survivor")
}

// testNotMigrated: before Migrate, Claim and Stats say ErrNotMigrated.
func (s *suite) testNotMigrated(t *testing.T) {
	fx := s.open(t, store.Options{})
	if _, err := tryClaim(t.Context(), fx.Store, req(s.lease("relay"), 10)); !errors.Is(err, store.ErrNotMigrated) {
		t.Errorf("Claim before Migrate: %v; want an error matching store.ErrNotMigrated", err)
	}
	if _, err := fx.Store.Stats(t.Context()); !errors.Is(err, store.ErrNotMigrated) {
		t.Errorf("Stats before Migrate: %v; want an error matching store.ErrNotMigrated", err)
	}
	if err := fx.Store.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if st := stats(t, fx); st != (store.Stats{}) {
		t.Errorf("Stats of a freshly migrated table: %+v; want all zero", st)
	}
	c := claim(t, fx, req(s.lease("relay"), 10))
	if len(c.Events) != 0 {
		t.Errorf("Claim on a freshly migrated table returned %d events", len(c.Events))
	}
}
