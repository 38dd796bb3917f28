// Package binlog is a MariaDB binlog source: it tails the server's binary
// log for the outbox table's inserts and implements source.Source, so the
// relay (relay.NewSource) delivers them. The outbox table stays the source
// of truth: whenever the log cannot be trusted, the source reads the
// table's undelivered rows instead, and nothing is lost.
//
// # The replication client is written here
//
// The usual Go library for the replication protocol
// (github.com/go-mysql-org/go-mysql) is not served by the module proxy this
// project builds with, so the client is written in this package and kept to
// what an outbox needs. go-sql-driver/mysql runs every ordinary query; it
// exposes no raw packets, so conn.go speaks the protocol itself over a
// net.Conn for the replication connection only: the handshake with
// mysql_native_password (an auth switch to another plugin is refused,
// naming the fix), COM_QUERY for the session variables of a replica,
// COM_REGISTER_SLAVE and COM_BINLOG_DUMP from a file and offset or from a
// MariaDB GTID position (@slave_connect_state, @slave_gtid_strict_mode=1,
// @mariadb_slave_capability=4), with checksums as the server writes them
// (@master_binlog_checksum) and server heartbeats (@master_heartbeat_period).
// No TLS on that connection.
//
// The decoder reads: the format description (checksum algorithm,
// post-header lengths), rotate (with the artificial one sent at each
// connect), query (BEGIN/COMMIT, and statements naming the outbox table),
// XID, XA prepare, table map (with column names under binlog_row_metadata=FULL), write,
// update and delete rows v1 and v2 and MariaDB's zlib-compressed variants
// (and compressed query events), MariaDB's GTID, GTID list, binlog
// checkpoint and annotate-rows events, and heartbeats; CRC32 checksums are
// verified. Column values: integers, CHAR/VARCHAR, BLOB/TEXT (MariaDB's
// JSON is LONGTEXT), MySQL's binary JSON, TIMESTAMP/DATETIME with
// fractions, and the sizes of the other types so that a row can be read
// past them. MySQL 8's zstd transaction payloads are recognised and
// refused with the setting to change. Other events are skipped. A malformed
// event (short, a bad checksum) is an error, never a panic (FuzzDecode);
// the stream treats it as a log it cannot trust. The decoder's tests run on
// binlog bytes captured from the local MariaDB (testdata/*.bin, produced by
// the statements in testdata/*.sql with -capture).
//
// # What the server needs
//
// MariaDB 10.5+ with log_bin on, binlog_format=ROW (global),
// binlog_row_image=FULL, a server_id, binlog_checksum CRC32 or NONE, and a
// user with REPLICATION SLAVE and REPLICATION CLIENT (BINLOG MONITOR);
// Start refuses anything else with one line naming the fix.
// binlog_row_metadata=FULL is recommended: without it the binlog carries no
// column names and the source maps columns by the table's current
// definition (it warns). MySQL is refused: the fallback read needs the
// binlog position of a consistent snapshot, which only MariaDB reports
// (binlog_snapshot_file/position); without it a transaction written to the
// binlog but not yet visible to the read could be missed by both.
//
// # What is delivered, and when
//
// The source buffers each transaction until its XID (or COMMIT, or the end
// of a standalone statement) and hands committed transactions out in binlog
// order, which is commit order; rolled-back transactions are not in the
// binlog. Inserts into the outbox table are delivered, and updates that
// turn a row back to NEW (`outbox dead retry`); rows that break the table
// contract are buried DEAD with the reason.
//
// Positions: source.Position is a counter the source assigns to the
// transactions it hands out, growing by one per transaction (those without
// outbox rows handed out at most once a second); it means nothing across
// processes. Each handed-out
// transaction remembers the binlog place after it: the file and offset,
// and the MariaDB GTID position there. Ack deletes the delivered rows in
// batches of DeleteBatch, fenced by the lease, and with the last batch
// writes that place to <table>_binlog as the resume position: at once when
// events were acknowledged, at most every SaveEvery when only other
// tables' transactions were (so an idle outbox on a busy server writes
// rarely). The resume position never passes an unsettled event; a crash
// streams again from it: duplicates with the same event ids, nothing lost.
// A stream that drops (a killed connection, a server restart, a stall past
// three heartbeats) reconnects after the last whole transaction it read,
// by GTID. A rotate (FLUSH BINARY LOGS) is followed as the server sends it.
//
// # Falling back to the table
//
// The source reads the table's undelivered rows (status NEW, in id order)
// in a consistent snapshot, hands them out, and streams on from the
// snapshot's binlog position, at first start (no saved position) and
// whenever the log cannot be trusted: the saved position is gone (purged:
// error 1236), the server's GTID history diverged from the saved one
// (strict mode refuses it: error 1236), a statement naming the outbox table
// arrived as text (an INSERT from a session whose binlog_format is
// STATEMENT or MIXED, whose rows are not in the log; or a change of its
// definition: ALTER, …), a table map that does not match the outbox
// columns, an incident event, a malformed event, or the XA COMMIT of an XA
// transaction that wrote the outbox table (MariaDB logs its rows at XA
// PREPARE, before it commits, so they are not delivered then) or that was
// prepared before the stream started (it may have). Rows handed out and not
// yet acknowledged are read again (duplicates); nothing is missed, since
// the snapshot holds every transaction before its binlog position and the
// stream every one after it. Each fallback is logged with its reason,
// counted (Fallbacks) and reported to Config.OnFallback. A table without a
// column the contract requires stops the source (run `outbox migrate`).
//
// # One streamer at a time
//
// The lease is the row of <table>_binlog: owner, a fencing epoch and an
// expiry on the database clock, renewed every third of LeaseFor. Other
// processes wait in Start and take over once it expired, resuming from the
// saved position. Every write (Ack's deletes and position, Bury) locks the
// row and checks owner and epoch in the same transaction before it
// commits, so a process that stalled past its lease and was taken over
// changes nothing and stops with source.ErrFenced. A renewal that comes
// late (commits stall under load) keeps a lease nobody took over.
package binlog
