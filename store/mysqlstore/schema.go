package mysqlstore

import (
	"fmt"
	"strconv"
	"strings"
)

// migrationVersion is the version of the schema below, recorded in
// <table>_migrations once all its statements ran; Migrate does nothing
// more over a table that records it (or a later version).
const migrationVersion = 1

// schema is the statements that create the outbox table t (quoted, maybe
// qualified), its archive, shard leases and relay heartbeats; short is t's
// unquoted name. Migrate runs them under a GET_LOCK. MySQL commits DDL at
// once, so they cannot be a transaction: every statement is idempotent
// (CREATE … IF NOT EXISTS, indexes declared inside CREATE TABLE because
// MySQL has no CREATE INDEX IF NOT EXISTS, INSERT IGNORE), and a Migrate
// interrupted half way is simply run again.
//
// Column types are chosen to work unchanged on MySQL 8.0.16+ and MariaDB
// 10.6+: expression defaults in parentheses (UUID(), the empty string for BLOB and TEXT, '{}'
// for JSON) and enforced CHECK constraints. Every TIMESTAMP column states its
// NULL-ness and DEFAULT, so neither server's legacy implicit
// "DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP" ever applies.
//
// Indexes. MySQL has no partial indexes, so pgstore's (the rows that hold
// a key) is emulated with an index over an invisible stored generated
// column: hold_key is the event_key of a row that can hold its key
// (SENDING, DEAD, or NEW waiting for a retry or a delayed AvailableAt) and
// NULL for every other row, so an ordinary insert adds a ~20-byte (status,
// NULL, next_attempt_at, id) entry. The claim's per-candidate probes "does
// this key have a live SENDING / earlier DEAD / earlier delayed NEW row?"
// are then ref lookups on (status, hold_key) that read only the few
// holding rows of that key, however long the key's backlog. (An index on
// (status, event_key, next_attempt_at) instead made the delayed probe scan
// a hot key's whole backlog for every candidate: the optimizers never use
// a range on the third column of a correlated lookup.)
//
// Ordering by ownership (driver.Driver, owned.go) adds parked and four
// VIRTUAL columns, each with its index where one is named:
//
//   - parked: a row the claim met behind a held earlier row of its key;
//     it leaves the claim's index until its key moves on.
//   - shard: the row's shard (not indexed, read by the claim).
//   - lane: the shard of a NEW row that is not parked, NULL otherwise;
//     (lane, id) is the index every claim walks, one range per shard in id
//     order, so it never reads in-flight, DEAD or parked rows.
//   - busy: the shard of a SENDING row; (busy, lease_until) finds the
//     in-flight rows of the claim's shards (another owner's live ones make
//     it skip the shard, expired ones are taken over).
//   - parked_key: the key of a parked row; (parked_key, id) finds a key's
//     parked rows, lowest first, and the keys that have any.
//
// A plain insert adds three small entries with NULLs to these indexes
// besides its lane entry. INVISIBLE (MySQL 8.0.23+, MariaDB 10.3+) keeps
// the generated columns out of SELECT * and out of INSERTs without a
// column list.
//
// The shard leases are one row per shard, made here. Each relay's row in
// <table>_relays records its own lease in microseconds (lease_for), so
// that a heartbeat keeps the row of a relay whose membership ended for as
// long as that relay's claims may still be leased, whatever the lease of
// the relay that deletes it (see relayRetention), and the id of its own
// connection (conn), which holds the owner's session lock (session.go):
// once that lock is free, the relay's shards move on at once, not at its
// lease's end.
func schema(t, archive, short string) []string {
	shards := suffixed(t, "_shards")
	relays := suffixed(t, "_relays")
	return []string{
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
	id              BIGINT       NOT NULL AUTO_INCREMENT,
	event_id        CHAR(36) CHARACTER SET ascii COLLATE ascii_general_ci NOT NULL DEFAULT (UUID()),
	topic           VARCHAR(255) NOT NULL,
	event_key       VARCHAR(255) NOT NULL DEFAULT '',
	event_type      VARCHAR(255) NOT NULL DEFAULT '',
	aggregate_type  VARCHAR(255) NOT NULL DEFAULT '',
	schema_version  INT          NOT NULL DEFAULT 1,
	payload         LONGBLOB     NOT NULL DEFAULT (''),
	content_type    VARCHAR(255) NOT NULL DEFAULT 'application/json',
	headers         JSON         NOT NULL DEFAULT ('{}'),
	status          VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'NEW',
	attempts        INT          NOT NULL DEFAULT 0,
	next_attempt_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	last_error      TEXT         NOT NULL DEFAULT (''),
	lease_owner     VARCHAR(64)  NOT NULL DEFAULT '',
	lease_epoch     BIGINT       NOT NULL DEFAULT 0,
	lease_until     TIMESTAMP(6) NULL DEFAULT NULL,
	created_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	sent_at         TIMESTAMP(6) NULL DEFAULT NULL,
	hold_key        VARCHAR(255) GENERATED ALWAYS AS (CASE WHEN event_key <> '' AND (status <> 'NEW' OR next_attempt_at > created_at) THEN event_key END) STORED INVISIBLE,
	parked          BOOLEAN      NOT NULL DEFAULT 0,
	shard           TINYINT UNSIGNED AS (%[3]s) VIRTUAL INVISIBLE,
	lane            TINYINT UNSIGNED AS (CASE WHEN status = 'NEW' AND parked = 0 THEN %[3]s END) VIRTUAL INVISIBLE,
	busy            TINYINT UNSIGNED AS (CASE WHEN status = 'SENDING' THEN %[3]s END) VIRTUAL INVISIBLE,
	parked_key      VARCHAR(255) AS (CASE WHEN parked = 1 THEN event_key END) VIRTUAL INVISIBLE,
	PRIMARY KEY (id),
	UNIQUE KEY %[2]s_event_id_key (event_id),
	KEY %[2]s_hold_idx (status, hold_key, next_attempt_at),
	KEY %[2]s_lane_idx (lane, id),
	KEY %[2]s_busy_idx (busy, lease_until),
	KEY %[2]s_parked_idx (parked_key, id),
	CONSTRAINT %[2]s_status_check CHECK (status IN ('NEW', 'SENDING', 'DEAD'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`, t, short, shardSQL),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
	id              BIGINT       NOT NULL,
	event_id        CHAR(36) CHARACTER SET ascii COLLATE ascii_general_ci NOT NULL,
	topic           VARCHAR(255) NOT NULL,
	event_key       VARCHAR(255) NOT NULL,
	event_type      VARCHAR(255) NOT NULL,
	aggregate_type  VARCHAR(255) NOT NULL,
	schema_version  INT          NOT NULL,
	payload         LONGBLOB     NOT NULL,
	content_type    VARCHAR(255) NOT NULL,
	headers         JSON         NOT NULL,
	status          VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'SENT',
	attempts        INT          NOT NULL,
	next_attempt_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	last_error      TEXT         NOT NULL,
	lease_owner     VARCHAR(64)  NOT NULL,
	lease_epoch     BIGINT       NOT NULL,
	lease_until     TIMESTAMP(6) NULL DEFAULT NULL,
	created_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	sent_at         TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	PRIMARY KEY (id),
	KEY %[2]s_archive_sent_idx (sent_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`, archive, short),
		`CREATE TABLE IF NOT EXISTS ` + shards + ` (
	shard       INT         NOT NULL PRIMARY KEY,
	owner       VARCHAR(64) NOT NULL DEFAULT '',
	epoch       BIGINT      NOT NULL DEFAULT 0,
	lease_until BIGINT      NOT NULL DEFAULT 0,
	KEY ` + short + `_shards_owner_idx (owner)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		"INSERT IGNORE INTO " + shards + " (shard) VALUES " + shardValues(),
		`CREATE TABLE IF NOT EXISTS ` + relays + ` (
	owner       VARCHAR(64) NOT NULL PRIMARY KEY,
	lease_until BIGINT      NOT NULL,
	lease_for   BIGINT      NULL DEFAULT NULL,
	conn        BIGINT      NULL DEFAULT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	}
}

// shardValues is the VALUES list of every shard number.
func shardValues() string {
	parts := make([]string, numShards)
	for i := range parts {
		parts[i] = "(" + strconv.Itoa(i) + ")"
	}
	return strings.Join(parts, ",")
}

// suffixed is the quoted name t (a quoted, maybe qualified table name)
// with suffix appended to the table's name.
func suffixed(t, suffix string) string { return strings.TrimSuffix(t, "`") + suffix + "`" }
