package sqlitestore_test

import (
	"database/sql"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/sqlitestore"
	"github.com/outbox-go/outbox/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openDB opens a fresh database file in dir with the settings Open uses.
func openDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	dsn, err := sqlitestore.DSN("sqlite:" + path)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// TestConformance gives every suite table a database file of its own.
// New (which the suite uses to migrate one table from several stores at
// once) finds the file of the table it is asked for.
func TestConformance(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	dbs := map[string]*sql.DB{"": openDB(t, filepath.Join(dir, "shared.db"))}
	defer func() {
		for _, db := range dbs {
			db.Close()
		}
	}()
	dbFor := func(table string) *sql.DB {
		mu.Lock()
		defer mu.Unlock()
		if db, ok := dbs[table]; ok {
			return db
		}
		return dbs[""]
	}
	storetest.Run(t, storetest.Harness{
		Name:         "sqlite",
		SingleWriter: true,
		New: func(opts store.Options) (store.Store, error) {
			return sqlitestore.New(dbFor(opts.Table), sqlitestore.Config{Options: opts})
		},
		Open: func(t *testing.T, opts store.Options) storetest.Fixture {
			db := openDB(t, filepath.Join(t.TempDir(), opts.Table+".db"))
			mu.Lock()
			dbs[opts.Table] = db
			mu.Unlock()
			st, err := sqlitestore.New(db, sqlitestore.Config{Options: opts})
			if err != nil {
				t.Fatal(err)
			}
			// Each table has a file of its own under t.TempDir, which
			// removes it: dropping the tables is closing the handle.
			t.Cleanup(func() {
				st.Close()
				mu.Lock()
				delete(dbs, opts.Table)
				mu.Unlock()
				db.Close()
			})
			return storetest.Fixture{Store: st, DB: db, Table: st.Table(), Placeholder: storetest.Question}
		},
	})
}
