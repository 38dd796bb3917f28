package sqlitestore

import "fmt"

// nowUS is the database clock in unix microseconds. SQLite's clock has
// millisecond resolution and is the same within one statement; julianday
// (rather than unixepoch('subsec'), SQLite 3.42+) keeps the column defaults
// usable by any SQLite a producer in another language links.
const nowUS = `(CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)`

// uuidV4 is a random UUID in the canonical 36-character form, the default of
// event_id for rows a producer inserts without one.
const uuidV4 = `(lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-' ||
	substr('89ab', 1 + (abs(random()) % 4), 1) || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))))`

// migrationVersion is the version of the schema below, recorded in
// <table>_migrations once it is in place; Migrate does nothing more over a
// table that records it (or a later version).
const migrationVersion = 1

// schema is the statements that create the outbox table t (quoted), its
// archive, shard lease and relay heartbeats; short is t's unquoted name.
// Migrate runs them inside the BEGIN IMMEDIATE transaction that serializes
// it; every one is idempotent (IF NOT EXISTS, INSERT OR IGNORE). A list,
// because not every database/sql SQLite driver runs several statements in
// one Exec.
//
// The outbox table is the table contract of DESIGN §4, plus parked (a row
// the claim met behind a held earlier row of its key). Ordering by
// ownership (driver.Driver) has one shard in SQLite (see owned.go): the
// shard table holds one row, and a relay takes it over when its holder's
// lease ran out or it left.
func schema(t, archive, short string) []string {
	return []string{
		// AUTOINCREMENT: a plain rowid alias takes max(id)+1, so once
		// the newest events are acked (deleted) their ids would be
		// handed out again: the archive's primary key would refuse the
		// second SENT copy, and operators and logs would see two events
		// under one id. AUTOINCREMENT never reuses an id.
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	event_id        TEXT    NOT NULL DEFAULT %[2]s CHECK (length(event_id) = 36),
	topic           TEXT    NOT NULL CHECK (length(topic) <= 255),
	event_key       TEXT    NOT NULL DEFAULT '' CHECK (length(event_key) <= 255),
	event_type      TEXT    NOT NULL DEFAULT '' CHECK (length(event_type) <= 255),
	aggregate_type  TEXT    NOT NULL DEFAULT '' CHECK (length(aggregate_type) <= 255),
	schema_version  INTEGER NOT NULL DEFAULT 1,
	payload         BLOB    NOT NULL DEFAULT x'',
	content_type    TEXT    NOT NULL DEFAULT 'application/json' CHECK (length(content_type) <= 255),
	headers         TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(headers)),
	status          TEXT    NOT NULL DEFAULT 'NEW' CHECK (status IN ('NEW', 'SENDING', 'DEAD')),
	attempts        INTEGER NOT NULL DEFAULT 0,
	next_attempt_at INTEGER NOT NULL DEFAULT %[3]s,
	last_error      TEXT    NOT NULL DEFAULT '',
	lease_owner     TEXT    NOT NULL DEFAULT '' CHECK (length(lease_owner) <= 64),
	lease_epoch     INTEGER NOT NULL DEFAULT 0,
	lease_until     INTEGER,
	created_at      INTEGER NOT NULL DEFAULT %[3]s,
	sent_at         INTEGER,
	parked          INTEGER NOT NULL DEFAULT 0,
	CONSTRAINT "%[4]s_event_id_key" UNIQUE (event_id)
)`, t, uuidV4, nowUS, short),
		// The claim's "key held" checks, one small partial index each
		// (SQLite uses a partial index only when the query repeats its
		// WHERE terms, so one index per kind of holder). Plain inserts
		// (status NEW, next_attempt_at = created_at) are in none of them.
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS "%[2]s_sending_idx" ON %[1]s (event_key, lease_until) WHERE status = 'SENDING'`, t, short),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS "%[2]s_dead_idx" ON %[1]s (event_key, id) WHERE status = 'DEAD'`, t, short),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS "%[2]s_delayed_idx" ON %[1]s (event_key, id) WHERE status = 'NEW' AND next_attempt_at > created_at`, t, short),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
	id              INTEGER PRIMARY KEY,
	event_id        TEXT    NOT NULL,
	topic           TEXT    NOT NULL,
	event_key       TEXT    NOT NULL,
	event_type      TEXT    NOT NULL,
	aggregate_type  TEXT    NOT NULL,
	schema_version  INTEGER NOT NULL,
	payload         BLOB    NOT NULL,
	content_type    TEXT    NOT NULL,
	headers         TEXT    NOT NULL,
	status          TEXT    NOT NULL DEFAULT 'SENT',
	attempts        INTEGER NOT NULL,
	next_attempt_at INTEGER NOT NULL,
	last_error      TEXT    NOT NULL,
	lease_owner     TEXT    NOT NULL,
	lease_epoch     INTEGER NOT NULL,
	lease_until     INTEGER,
	created_at      INTEGER NOT NULL,
	sent_at         INTEGER NOT NULL
)`, archive),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS "%[2]s_archive_sent_idx" ON %[1]s (sent_at)`, archive, short),
		// The ownership claim walks this index in id order: rows
		// that are NEW and not parked, so it never reads past a
		// parked row again.
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS "%[2]s_ready_idx" ON %[1]s (id) WHERE status = 'NEW' AND parked = 0`, t, short),
		// A key's parked rows, for unparking them lowest first.
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS "%[2]s_parked_idx" ON %[1]s (event_key, id) WHERE parked = 1`, t, short),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS "%[1]s_shards" (
	shard       INTEGER PRIMARY KEY,
	owner       TEXT    NOT NULL DEFAULT '',
	epoch       INTEGER NOT NULL DEFAULT 0,
	lease_until INTEGER NOT NULL DEFAULT 0
)`, short),
		fmt.Sprintf(`INSERT OR IGNORE INTO "%[1]s_shards" (shard) VALUES (0)`, short),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS "%[1]s_relays" (
	owner       TEXT    PRIMARY KEY,
	lease_until INTEGER NOT NULL
)`, short),
	}
}
