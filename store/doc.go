// Package store is what an application calls to use the outbox: Enqueue
// events (alone, or with EnqueueTx inside its own transaction, so that they
// commit or roll back with its business change), the operator's tools
// (Get, ListDead, RequeueDead, Purge, Stats and Backlog), and Migrate.
// The implementations are store/pgstore, store/mysqlstore and
// store/sqlitestore; each passes the conformance suite in store/storetest.
//
// A producer opens the store of its database once, creates the table once
// (or runs `outbox migrate`), and enqueues inside its own transactions:
//
//	st, err := mysqlstore.Open(ctx, "mysql://user:pass@host:3306/app", mysqlstore.Config{}) // or sqlitestore.Open, pgstore.New(pool, …)
//	err = st.Migrate(ctx) // idempotent
//	tx, err := st.DB().BeginTx(ctx, nil)
//	// ... the business change on tx ...
//	err = st.EnqueueTx(ctx, tx, outbox.Message{Topic: "orders.paid", Key: "order-42", Type: "OrderPaid", Payload: payload})
//	err = tx.Commit() // commit: the event exists; rollback: it never did
//
// With pgx, pgstore's EnqueuePgxTx takes a pgx.Tx. Complete programs:
// examples/quickstart in the repository.
//
// The relay (package relay) drives the same store value through its
// driver (package store/driver): shard leases, claims and the fenced
// acknowledgements. Users never call that seam.
//
// # The table is the contract
//
// A producer in any language can enqueue by inserting a row into the
// outbox table with plain SQL (topic, event_key, event_type, payload; every
// other column has a default). Enqueue validates a message before anything
// is written (a *outbox.ValidationError, and the caller's transaction stays
// usable), fills in the event id, schema version and content type, and runs
// Options.Check. A row written with plain SQL that breaks the contract
// (headers that are not a JSON object of strings, an empty topic or
// event_type, control characters, a negative schema_version) never stalls
// delivery: the claim that takes it marks it DEAD with a one-line reason,
// so it shows in ListDead and Stats and holds only its own key. So does a
// value the database accepts that no time or integer of the relay's holds
// ('infinity', SQLite text in an INTEGER column), with the column named;
// a row due at no time, or a year or more ahead, is counted in
// Stats.HeldForGood. The stores refuse at INSERT the rules they can check
// cheaply.
//
// Reads cost what they show: ListDead returns a payload's first
// PreviewBytes and its size; Get the whole; CopyPayload streams it.
//
// # Order and dead letters
//
// Events of one event_key reach the broker in id order. A DEAD event holds
// the later events of its key (unless the relay runs with SkipKey) until an
// operator requeues it (RequeueDead) or purges it (Purge); Stats counts
// such keys in BlockedKeys.
package store
