package sqlitestore

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// DefaultBusyTimeout is how long, in milliseconds, a connection opened from
// DSN waits for another writer's lock before failing with SQLITE_BUSY.
const DefaultBusyTimeout = 5000

// MemoryURL names a private in-memory database: every Open of it is a new,
// empty database that lives until the Store is closed.
const MemoryURL = "sqlite::memory:"

// target is a parsed sqlite: URL.
type target struct {
	path   string     // file path; empty for memory
	memory bool       // sqlite::memory:
	params url.Values // driver parameters from the URL's query
}

// parseURL parses the outbox database URL forms for SQLite:
//
//	sqlite:path/to/file.db     relative to the working directory
//	sqlite:/abs/path/file.db   absolute
//	sqlite://path/to/file.db   the same as sqlite:path/to/file.db
//	sqlite:///abs/path/file.db the same as sqlite:/abs/path/file.db
//	sqlite::memory:            a private in-memory database
//
// "sqlite3:" is accepted as well. The path is taken literally (no percent
// decoding); everything after the first '?' is a query of modernc.org/sqlite
// DSN parameters (_pragma=…, _txlock=…, _busy_timeout=…, vfs=…).
func parseURL(raw string) (target, error) {
	var t target
	scheme, rest, ok := strings.Cut(raw, ":")
	if !ok || (!strings.EqualFold(scheme, "sqlite") && !strings.EqualFold(scheme, "sqlite3")) {
		return t, fmt.Errorf("sqlitestore: %q is not a SQLite URL: use sqlite:path/to/file.db or %s", clip(raw), MemoryURL)
	}
	rest = strings.TrimPrefix(rest, "//")
	path, query, _ := strings.Cut(rest, "?")
	switch {
	case path == "":
		return t, fmt.Errorf("sqlitestore: %q names no database file: use sqlite:path/to/file.db or %s", clip(raw), MemoryURL)
	case strings.ContainsRune(path, 0):
		return t, fmt.Errorf("sqlitestore: %q: the path contains a NUL byte", clip(raw))
	case strings.HasPrefix(strings.ToLower(path), "file:"):
		return t, fmt.Errorf("sqlitestore: %q: give a plain path (sqlite:path/to/file.db), not a file: URI", clip(raw))
	case path == ":memory:":
		t.memory = true
	default:
		t.path = path
	}
	params, err := url.ParseQuery(query)
	if err != nil {
		return t, fmt.Errorf("sqlitestore: %q: bad query: %v", clip(raw), err)
	}
	for k := range params {
		if !strings.HasPrefix(k, "_") && k != "vfs" {
			return t, fmt.Errorf("sqlitestore: %q: unknown parameter %q: use the driver's parameters such as _pragma=synchronous(NORMAL), _busy_timeout=10000 or _txlock=immediate", clip(raw), k)
		}
	}
	if t.memory && params.Has("vfs") {
		return t, fmt.Errorf("sqlitestore: %q: %s picks its own VFS (memdb); drop the vfs parameter", clip(raw), MemoryURL)
	}
	t.params = params
	return t, nil
}

// clip keeps error messages one short line even for hostile input.
func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// DSN turns an outbox database URL (sqlite:path/to/file.db, sqlite://path,
// sqlite::memory:) into a modernc.org/sqlite data source name for
// sql.Open("sqlite", dsn). Unless the URL's query says otherwise it asks for:
//
//   - _pragma=busy_timeout(5000): a writer waits up to 5 s for another
//     writer's lock instead of failing at once with SQLITE_BUSY;
//   - _pragma=journal_mode(WAL): readers never block the writer nor it them
//     (files only; the in-memory database keeps a rollback journal);
//   - _pragma=foreign_keys(1);
//   - _txlock=immediate: BeginTx takes the write lock at BEGIN, so two
//     transactions never both read and then fail to upgrade to writing
//     (which SQLite reports as SQLITE_BUSY without waiting).
//
// Parameters in the URL's query are passed on and win over these defaults,
// e.g. sqlite:app.db?_pragma=synchronous(NORMAL) trades the durability of the
// last commits on power loss for faster commits.
//
// sqlite::memory: becomes a database of the memdb VFS with a fresh random
// name, so each call names a new private database that the connections of
// one *sql.DB share; it is freed when its last connection closes (Open keeps
// one open until Close).
func DSN(rawURL string) (string, error) {
	t, err := parseURL(rawURL)
	if err != nil {
		return "", err
	}
	return t.dsn(), nil
}

func (t target) dsn() string {
	have := func(keys ...string) bool {
		for _, k := range keys {
			if t.params.Has(k) {
				return true
			}
		}
		return false
	}
	userPragmas := map[string]bool{}
	for _, p := range t.params["_pragma"] {
		userPragmas[pragmaName(p)] = true
	}
	var pragmas []string
	if !userPragmas["busy_timeout"] && !have("_busy_timeout", "_timeout") {
		pragmas = append(pragmas, fmt.Sprintf("busy_timeout(%d)", DefaultBusyTimeout))
	}
	if !userPragmas["foreign_keys"] && !have("_foreign_keys", "_fk") {
		pragmas = append(pragmas, "foreign_keys(1)")
	}
	if !t.memory && !userPragmas["journal_mode"] && !have("_journal_mode", "_journal") {
		pragmas = append(pragmas, "journal_mode(WAL)")
	}
	var q []string
	add := func(k, v string) { q = append(q, url.QueryEscape(k)+"="+url.QueryEscape(v)) }
	if t.memory {
		add("vfs", "memdb")
	}
	for _, p := range pragmas {
		add("_pragma", p)
	}
	if !have("_txlock") {
		add("_txlock", "immediate")
	}
	keys := make([]string, 0, len(t.params))
	for k := range t.params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range t.params[k] {
			add(k, v)
		}
	}
	name := t.path
	if t.memory {
		// A name starting with "/" is shared by the connections of this
		// process that open it; the random part keeps it private.
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		name = "file:/outbox-" + hex.EncodeToString(b)
	}
	return name + "?" + strings.Join(q, "&")
}

// pragmaName returns the lower-case name of a _pragma value such as
// "busy_timeout(5000)" or "journal_mode = WAL".
func pragmaName(p string) string {
	p = strings.TrimSpace(p)
	if i := strings.IndexAny(p, "(= "); i >= 0 {
		p = p[:i]
	}
	return strings.ToLower(p)
}
