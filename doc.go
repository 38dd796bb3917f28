// Package outbox is the public face of the transactional outbox: the Message a
// service writes in the same database transaction as its business change, the
// validation every message passes before anything is written, and the errors
// callers branch on.
//
// A relay (package relay) later delivers each committed message to a broker at
// least once, in order per Message.Key. Consumers drop the rare duplicate by
// EventID (package inbox).
//
// Enqueueing itself is done by a store, which knows the SQL dialect:
//
//	st, _ := pgstore.New(pool, pgstore.Config{})
//	tx, _ := pool.Begin(ctx)
//	// ... business writes on tx ...
//	_ = st.EnqueuePgxTx(ctx, tx, outbox.Message{Topic: "orders", Key: "order-42", Type: "OrderPaid", Payload: body})
//	_ = tx.Commit(ctx) // commit → the event exists; rollback → it never did
package outbox
