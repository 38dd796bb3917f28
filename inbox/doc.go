// Package inbox is the consumer side of the outbox: idempotent consumption
// inside the consumer's own database transaction, on PostgreSQL,
// MySQL/MariaDB and SQLite (through database/sql; pgx users open their pool
// with pgx's stdlib driver or stdlib.OpenDBFromPool).
//
// The relay delivers every event at least once, so a consumer sometimes
// sees one twice: a broker confirmation lost after the send, a consumer
// that crashed before acknowledging. Handle makes the second delivery
// harmless. In one transaction it inserts (consumer, event_id) into the
// inbox table, whose primary key is that pair, and runs the handler with
// the same transaction:
//
//	in, _ := inbox.New(db, inbox.Config{})
//	_ = in.Migrate(ctx) // once at start-up; idempotent
//
//	msg, err := kafkamsg.FromRecord(record) // or natsmsg / amqpmsg
//	if err != nil { /* malformed: dead-letter it */ }
//	result, err := in.Handle(ctx, "points", msg, func(ctx context.Context, tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, "UPDATE points SET balance = balance + $1 WHERE customer = $2", n, who)
//		return err
//	})
//	// err == nil (Processed or Duplicate): acknowledge the message.
//	// err != nil: nothing was recorded; let the broker redeliver.
//
// The insert never aborts the transaction on a duplicate (ON CONFLICT DO
// NOTHING on PostgreSQL and SQLite, INSERT IGNORE on MySQL); zero rows
// inserted means the consumer has processed the event before, and the
// handler does not run. Otherwise the handler's writes and the inbox record
// commit together, or, if the handler returns an error or panics, roll back
// together, so a redelivery is processed as if for the first time.
//
// Two consumer instances that get the same event at once cannot both
// commit its effects: the second insert waits on the first one's
// uncommitted key (SQLite: on the writer lock) and then finds the duplicate,
// or, if the first rolled back, goes ahead itself. On MySQL, waiters on a
// rolled-back key can deadlock on the freed gap; Handle then retries the
// insert in a new transaction (the handler has not run yet).
//
// # Tables
//
// Migrate creates two tables (names from Config.Table, default
// "outbox_inbox"):
//
//	outbox_inbox           consumer, event_id, event_type, event_key, processed_at
//	                       PRIMARY KEY (consumer, event_id); index on processed_at
//	outbox_inbox_versions  consumer, event_key, version, updated_at
//	                       PRIMARY KEY (consumer, event_key); only CheckVersion uses it
//
// event_id is UUID on PostgreSQL and CHAR(36) elsewhere, always the
// canonical lower-case form, so the same id written differently is one id.
// processed_at is the database's clock: TIMESTAMPTZ on PostgreSQL, UTC
// DATETIME(6) on MySQL, microseconds since the Unix epoch on SQLite.
// event_type and event_key are kept for diagnosis (cut to 255 characters).
//
// # Retention
//
// Purge deletes records older than a given age in small batches. Choose
// the age well beyond the longest time a broker may still redeliver (topic
// or stream retention, dead-letter replays): an event redelivered after
// its record is gone is processed again.
//
// # Order
//
// The relay keeps per-key order, but a consumer can still meet an older
// event after a newer one (competing consumers, redelivery of an earlier
// failure). CheckVersion is the guard for handlers that overwrite state;
// see its documentation for when to use it.
//
// # Brokers
//
// The subpackages build a Message from each client's message, reading the
// CloudEvents binary-mode headers the relay sets, so no consumer parses
// headers by hand; each imports only its own client:
//
//	inbox/kafkamsg  franz-go *kgo.Record: ce_id, ce_type, …; record key = event key
//	inbox/natsmsg   *nats.Msg, jetstream.Msg: ce-id, … (percent-decoded), Nats-Msg-Id
//	inbox/amqpmsg   amqp091.Delivery: cloudEvents:id, …, message-id, type
//
// A missing or malformed event id, schema version or time is an error
// (ErrMissingEventID, ErrMalformedHeader): retrying cannot fix it, so
// dead-letter such a message instead of redelivering it.
//
// # Databases
//
// PostgreSQL: any isolation level; READ COMMITTED (the default) is enough.
// With REPEATABLE READ or SERIALIZABLE a racing duplicate can surface as a
// serialization failure, which Handle retries. MySQL/MariaDB: InnoDB, any
// isolation level. SQLite: one writer at a time, so give the database a
// busy timeout so writers wait instead of failing (modernc.org/sqlite:
// "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate").
//
// Package inboxtest is the suite this package passes on all three.
package inbox
