package mysqlstore

import (
	"fmt"
	"strings"
)

// migrations are applied in order under a GET_LOCK; each is recorded in
// <table>_migrations once all its statements ran. MySQL commits DDL at once,
// so a migration cannot be a transaction: every statement is idempotent
// (CREATE … IF NOT EXISTS, indexes declared inside CREATE TABLE because MySQL
// has no CREATE INDEX IF NOT EXISTS), and a migration interrupted half way is
// simply run again.
//
// Column types are chosen to work unchanged on MySQL 8.0.16+ and MariaDB
// 10.6+: expression defaults in parentheses (UUID(), the empty string for BLOB and TEXT, '{}'
// for JSON) and enforced CHECK constraints. Every TIMESTAMP column states its
// NULL-ness and DEFAULT, so neither server's legacy implicit
// "DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP" ever applies.
//
// Indexes. MySQL has no partial indexes, so pgstore's two (in-flight and
// dead rows by key; delayed NEW rows by key) are emulated with one index over
// an invisible stored generated column: hold_key is the event_key of a row
// that can hold its key (SENDING, DEAD, or NEW waiting for a retry or a
// delayed AvailableAt) and NULL for every other row, so an ordinary insert
// adds a ~20-byte (status, NULL, next_attempt_at, id) entry. The claim's
// per-candidate probes "does this key have a live SENDING / earlier DEAD /
// earlier delayed NEW row?" are then ref lookups on (status, hold_key) that
// read only the few holding rows of that key, however long the key's
// backlog. (An index on (status, event_key, next_attempt_at) instead made
// the delayed probe scan a hot key's whole backlog for every candidate: the
// optimizers never use a range on the third column of a correlated lookup.)
// The claim walks the primary key in id order, as pgstore's does.
// INVISIBLE (MySQL 8.0.23+, MariaDB 10.3+) keeps hold_key out of SELECT *
// and out of INSERTs without a column list.
func migrations(t, archive, short string) [][]string {
	return [][]string{
		// 1: the table contract of DESIGN §4.
		{fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
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
	PRIMARY KEY (id),
	UNIQUE KEY %[3]s_event_id_key (event_id),
	KEY %[3]s_hold_idx (status, hold_key, next_attempt_at),
	CONSTRAINT %[3]s_status_check CHECK (status IN ('NEW', 'SENDING', 'DEAD'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`, t, archive, short),
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[2]s (
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
	KEY %[3]s_archive_sent_idx (sent_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`, t, archive, short)},
		// 2: ordering by ownership (driver.Driver); see owned.go. parked is
		// an ordinary column with a constant default and the others are
		// VIRTUAL, so the ALTERs that add them change only the table's
		// metadata (ALGORITHM=INSTANT); the three indexes over them are
		// built online (ALGORITHM=INPLACE, LOCK=NONE: producers and
		// relays keep writing while InnoDB reads the table once). Each
		// statement is skipped when what it adds exists (see
		// ownedMigration), so an interrupted run is simply run again.
		ownedMigration(t, short),
		// 3: each relay's row in <table>_relays records its own lease
		// (microseconds), so that a heartbeat keeps the row of a relay
		// whose membership ended for as long as that relay's claims may
		// still be leased, whatever the lease of the relay that deletes
		// it (see relayRetention). NULL in the rows written before, and
		// by relays of earlier versions, which name their columns. The
		// table holds a row per relay, so the ALTER is cheap whatever the
		// algorithm the server picks.
		{"?column:_relays.lease_for\nALTER TABLE " + suffixed(t, "_relays") + " ADD COLUMN lease_for BIGINT NULL DEFAULT NULL"},
	}
}

// suffixed is the quoted name t (a quoted, maybe qualified table name)
// with suffix appended to the table's name.
func suffixed(t, suffix string) string { return strings.TrimSuffix(t, "`") + suffix + "`" }
