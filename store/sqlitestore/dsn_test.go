package sqlitestore_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-go/outbox/store/sqlitestore"
)

const defaults = "_pragma=busy_timeout%285000%29&_pragma=foreign_keys%281%29&_pragma=journal_mode%28WAL%29&_txlock=immediate"

func TestDSN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url, want string
	}{
		{"sqlite:app.db", "app.db?" + defaults},
		{"sqlite:data/app.db", "data/app.db?" + defaults},
		{"sqlite:/var/lib/app.db", "/var/lib/app.db?" + defaults},
		{"sqlite://data/app.db", "data/app.db?" + defaults},
		{"sqlite:///var/lib/app.db", "/var/lib/app.db?" + defaults},
		{"SQLite3:app.db", "app.db?" + defaults},
		{"sqlite:my app.db", "my app.db?" + defaults},
		{"sqlite:app.db?_pragma=synchronous(NORMAL)", "app.db?" + defaults + "&_pragma=synchronous%28NORMAL%29"},
		{"sqlite:app.db?_pragma=busy_timeout(100)", "app.db?_pragma=foreign_keys%281%29&_pragma=journal_mode%28WAL%29&_txlock=immediate&_pragma=busy_timeout%28100%29"},
		{"sqlite:app.db?_busy_timeout=100", "app.db?_pragma=foreign_keys%281%29&_pragma=journal_mode%28WAL%29&_txlock=immediate&_busy_timeout=100"},
		{"sqlite:app.db?_pragma=journal_mode=DELETE", "app.db?_pragma=busy_timeout%285000%29&_pragma=foreign_keys%281%29&_txlock=immediate&_pragma=journal_mode%3DDELETE"},
		{"sqlite:app.db?_txlock=exclusive", "app.db?_pragma=busy_timeout%285000%29&_pragma=foreign_keys%281%29&_pragma=journal_mode%28WAL%29&_txlock=exclusive"},
		{"sqlite:app.db?_fk=0", "app.db?_pragma=busy_timeout%285000%29&_pragma=journal_mode%28WAL%29&_txlock=immediate&_fk=0"},
	} {
		got, err := sqlitestore.DSN(tc.url)
		if err != nil || got != tc.want {
			t.Errorf("DSN(%q) = %q, %v;\nwant %q", tc.url, got, err, tc.want)
		}
	}
}

func TestDSNMemory(t *testing.T) {
	t.Parallel()
	for _, u := range []string{sqlitestore.MemoryURL, "sqlite://:memory:", "sqlite::memory:?_pragma=synchronous(OFF)"} {
		a, err := sqlitestore.DSN(u)
		if err != nil {
			t.Fatalf("DSN(%q): %v", u, err)
		}
		b, _ := sqlitestore.DSN(u)
		if !strings.HasPrefix(a, "file:/outbox-") || !strings.Contains(a, "vfs=memdb") || !strings.Contains(a, "_txlock=immediate") || strings.Contains(a, "journal_mode") {
			t.Errorf("DSN(%q) = %q; want a memdb file: URI with immediate transactions and no WAL", u, a)
		}
		if a == b {
			t.Errorf("DSN(%q) named the same database twice (%q); each must be private", u, a)
		}
	}
}

func TestDSNErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"", "not a SQLite URL"},
		{"app.db", "not a SQLite URL"},
		{"postgres://localhost/db", "not a SQLite URL"},
		{"sqlitex:app.db", "not a SQLite URL"},
		{"sqlite:", "names no database file"},
		{"sqlite://", "names no database file"},
		{"sqlite:?_txlock=immediate", "names no database file"},
		{"sqlite:file:app.db", "not a file: URI"},
		{"sqlite:app.db?mode=ro", `unknown parameter "mode"`},
		{"sqlite:app.db?journal_mode=WAL", `unknown parameter "journal_mode"`},
		{"sqlite:app.db?_pragma=%zz", "bad query"},
		{"sqlite::memory:?vfs=unix", "drop the vfs parameter"},
		{"sqlite:a\x00b.db", "NUL"},
	} {
		_, err := sqlitestore.DSN(tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DSN(%q) error = %v; want one containing %q", tc.url, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), "sqlitestore: ") {
			t.Errorf("DSN(%q) error %q: want one line starting with \"sqlitestore: \"", tc.url, err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct{ url, want string }{
		{"sqlite:" + filepath.Join(dir, "missing", "app.db"), "does not exist"},
		{"sqlite:" + dir, "is a directory"},
		{"mysql://root@localhost/db", "not a SQLite URL"},
	} {
		st, err := sqlitestore.Open(context.Background(), tc.url, sqlitestore.Config{})
		if err == nil {
			st.Close()
			t.Errorf("Open(%q) succeeded; want an error containing %q", tc.url, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Open(%q) error = %q; want one line containing %q", tc.url, err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("Open created the missing directory")
	}
}

func FuzzDSN(f *testing.F) {
	for _, s := range []string{
		"sqlite:app.db", "sqlite:///tmp/x.db", "sqlite::memory:", "sqlite:x.db?_pragma=synchronous(NORMAL)&_txlock=deferred",
		"sqlite3://a/b?_busy_timeout=1", "sqlite:?", "sqlite:a?b?c", "sqlite:%zz", "postgres://x", "sqlite:x?_pragma=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		dsn, err := sqlitestore.DSN(raw)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "sqlitestore: ") {
				t.Fatalf("DSN(%q) error %q lacks the package prefix", raw, err)
			}
			return
		}
		name, query, ok := strings.Cut(dsn, "?")
		if !ok || name == "" || strings.ContainsRune(name, 0) {
			t.Fatalf("DSN(%q) = %q: want a file name, '?' and parameters", raw, dsn)
		}
		q, err := url.ParseQuery(query)
		if err != nil {
			t.Fatalf("DSN(%q) = %q: the driver cannot parse its parameters: %v", raw, dsn, err)
		}
		if len(q["_txlock"]) != 1 {
			t.Fatalf("DSN(%q) = %q: want exactly one _txlock", raw, dsn)
		}
		for k := range q {
			if !strings.HasPrefix(k, "_") && k != "vfs" {
				t.Fatalf("DSN(%q) = %q: parameter %q reached the driver", raw, dsn, k)
			}
		}
		if !strings.HasPrefix(name, "file:/outbox-") && strings.HasPrefix(strings.ToLower(name), "file:") {
			t.Fatalf("DSN(%q) = %q: a file: URI would let SQLite read URI parameters", raw, dsn)
		}
	})
}
