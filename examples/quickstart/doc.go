// Package quickstart holds the README's Quick start as four complete
// programs, each a main package of its own:
//
//   - producer: a pgx transaction that marks an order paid and enqueues
//     OrderPaid in the same transaction (PostgreSQL);
//   - producersql: the same with database/sql, on MariaDB/MySQL or SQLite
//     (what sqlx, GORM, ent and bun hand you underneath);
//   - relay: the relay in your own process, delivering to NATS JetStream;
//   - consumer: a NATS JetStream consumer that applies each event once,
//     through the inbox, in its own database transaction.
//
// quickstart_test.go builds and runs them against the local servers, so the
// README cannot show code that does not work.
package quickstart
