package inbox

import (
	"database/sql"
	"fmt"
	"hash/fnv"
	"reflect"
	"strings"
)

// Dialect is the SQL database the inbox tables live in.
type Dialect int

// The supported databases. The zero value asks New to detect the dialect
// from the *sql.DB's driver.
const (
	Detect   Dialect = iota // detect from the driver (pgx stdlib, lib/pq, go-sql-driver/mysql, modernc/mattn/ncruces sqlite)
	Postgres                // PostgreSQL 12+
	MySQL                   // MySQL 8 and MariaDB 10.6+
	SQLite                  // SQLite 3.35+
)

func (d Dialect) String() string {
	switch d {
	case Detect:
		return "detect"
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// detectDialect names the dialect from the driver's package path.
func detectDialect(db *sql.DB) (Dialect, error) {
	t := reflect.TypeOf(db.Driver())
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pkg := ""
	if t != nil {
		pkg = strings.ToLower(t.PkgPath())
	}
	switch {
	case strings.Contains(pkg, "sqlite"):
		return SQLite, nil
	case strings.Contains(pkg, "mysql"):
		return MySQL, nil
	case strings.Contains(pkg, "pgx"), strings.Contains(pkg, "lib/pq"), strings.Contains(pkg, "postgres"):
		return Postgres, nil
	}
	return Detect, fmt.Errorf("%w: cannot tell the database from driver %v; set Config.Dialect to inbox.Postgres, inbox.MySQL or inbox.SQLite", ErrInvalidConfig, t)
}

// statements holds the dialect's SQL, built once by New with the quoted
// table names.
type statements struct {
	migrate     []string // run in order under the migration lock
	record      string   // (consumer, event_id, event_type, event_key) → 1 row or 0 on conflict
	versionUp   string   // postgres/sqlite: upsert (consumer, key, version) → 1 row unless stale
	versionIns  string   // mysql: insert-if-absent (consumer, key, version)
	versionUpd  string   // mysql: (version, consumer, key, version) → 1 row unless stale
	purge       string   // (olderThan µs, limit) → rows deleted
	placeholder func(n int) string
}

func quote(d Dialect, name string) string {
	if d == MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

// sqliteNow is the current time in microseconds since the Unix epoch (UTC).
const sqliteNow = "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)"

func buildStatements(d Dialect, schema, table string) statements {
	q := func(n string) string {
		if schema != "" && d != SQLite {
			return quote(d, schema) + "." + quote(d, n)
		}
		return quote(d, n)
	}
	t, v := q(table), q(table+"_versions")
	var s statements
	switch d {
	case Postgres:
		s.placeholder = func(n int) string { return fmt.Sprintf("$%d", n) }
		s.migrate = []string{
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	consumer     VARCHAR(255) NOT NULL,
	event_id     UUID         NOT NULL,
	event_type   VARCHAR(255) NOT NULL DEFAULT '',
	event_key    VARCHAR(255) NOT NULL DEFAULT '',
	processed_at TIMESTAMPTZ  NOT NULL DEFAULT now(),
	PRIMARY KEY (consumer, event_id)
)`, t),
			fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (processed_at)`, quote(d, table+"_processed_at_idx"), t),
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	consumer   VARCHAR(255) NOT NULL,
	event_key  VARCHAR(255) NOT NULL,
	version    BIGINT       NOT NULL,
	updated_at TIMESTAMPTZ  NOT NULL DEFAULT now(),
	PRIMARY KEY (consumer, event_key)
)`, v),
		}
		s.record = `INSERT INTO ` + t + ` (consumer, event_id, event_type, event_key) VALUES ($1, $2, $3, $4) ON CONFLICT (consumer, event_id) DO NOTHING`
		s.versionUp = `INSERT INTO ` + v + ` AS v (consumer, event_key, version) VALUES ($1, $2, $3)
ON CONFLICT (consumer, event_key) DO UPDATE SET version = EXCLUDED.version, updated_at = now() WHERE v.version < EXCLUDED.version`
		s.purge = `DELETE FROM ` + t + ` WHERE ctid = ANY(ARRAY(SELECT ctid FROM ` + t +
			` WHERE processed_at < now() - CAST($1 AS BIGINT) * INTERVAL '1 microsecond' LIMIT $2))`
	case MySQL:
		s.placeholder = func(int) string { return "?" }
		// utf8mb4_bin: consumer names and keys compare exactly, as on the
		// other databases. processed_at is UTC (UTC_TIMESTAMP), so purges
		// do not depend on the session time zone.
		s.migrate = []string{
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	consumer     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	event_id     CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	event_type   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
	event_key    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
	processed_at DATETIME(6)  NOT NULL,
	PRIMARY KEY (consumer, event_id),
	KEY processed_at_idx (processed_at)
) ENGINE=InnoDB`, t),
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	consumer   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	event_key  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	version    BIGINT       NOT NULL,
	updated_at DATETIME(6)  NOT NULL,
	PRIMARY KEY (consumer, event_key)
) ENGINE=InnoDB`, v),
		}
		// INSERT IGNORE rather than ON DUPLICATE KEY UPDATE: with the
		// driver's clientFoundRows option a no-op update reports 1 row,
		// which would hide the duplicate. The values are checked before,
		// so IGNORE has nothing else to swallow.
		s.record = `INSERT IGNORE INTO ` + t + ` (consumer, event_id, event_type, event_key, processed_at) VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6))`
		s.versionIns = `INSERT IGNORE INTO ` + v + ` (consumer, event_key, version, updated_at) VALUES (?, ?, ?, UTC_TIMESTAMP(6))`
		s.versionUpd = `UPDATE ` + v + ` SET version = ?, updated_at = UTC_TIMESTAMP(6) WHERE consumer = ? AND event_key = ? AND version < ?`
		s.purge = `DELETE FROM ` + t + ` WHERE processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND LIMIT ?`
	case SQLite:
		s.placeholder = func(int) string { return "?" }
		// processed_at is microseconds since the Unix epoch (UTC).
		s.migrate = []string{
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	consumer     TEXT    NOT NULL,
	event_id     TEXT    NOT NULL,
	event_type   TEXT    NOT NULL DEFAULT '',
	event_key    TEXT    NOT NULL DEFAULT '',
	processed_at INTEGER NOT NULL,
	PRIMARY KEY (consumer, event_id)
) WITHOUT ROWID`, t),
			fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (processed_at)`, quote(d, table+"_processed_at_idx"), t),
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	consumer   TEXT    NOT NULL,
	event_key  TEXT    NOT NULL,
	version    INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (consumer, event_key)
) WITHOUT ROWID`, v),
		}
		s.record = `INSERT INTO ` + t + ` (consumer, event_id, event_type, event_key, processed_at) VALUES (?, ?, ?, ?, ` + sqliteNow + `) ON CONFLICT (consumer, event_id) DO NOTHING`
		s.versionUp = `INSERT INTO ` + v + ` (consumer, event_key, version, updated_at) VALUES (?, ?, ?, ` + sqliteNow + `)
ON CONFLICT (consumer, event_key) DO UPDATE SET version = excluded.version, updated_at = excluded.updated_at WHERE ` + v + `.version < excluded.version`
		s.purge = `DELETE FROM ` + t + ` WHERE (consumer, event_id) IN (SELECT consumer, event_id FROM ` + t +
			` WHERE processed_at < ` + sqliteNow + ` - ? LIMIT ?)`
	}
	return s
}

// lockKey is a stable 63-bit number naming the migration lock of a table.
func lockKey(schema, table string) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "outbox-inbox:migrate:%s.%s", schema, table)
	return int64(h.Sum64() >> 1)
}
