// Package eventschema checks event payloads against JSON Schemas at enqueue,
// one schema per (event type, schema version), so a malformed event is
// refused inside the producer's transaction instead of reaching consumers.
//
// Register a schema for each version of each event type, then hand the
// registry's Check to a store; every Enqueue and EnqueueTx runs it after the
// built-in checks and before anything is written:
//
//	reg := eventschema.New()
//	if err := reg.Register("OrderPaid", 1, orderPaidV1); err != nil {
//		log.Fatal(err) // the schema itself is wrong
//	}
//	st, err := sqlitestore.New(db, sqlitestore.Config{Options: store.Options{Check: reg.Check}})
//
// A refused message comes back as a *outbox.ValidationError: errors.Is
// matches both outbox.ErrInvalidMessage and outbox.ErrSchemaViolation, its
// Field is "Payload" followed by the JSON pointer of the failing value
// ("Payload/amount_cents"), and its Err is a *Violation with the reason
// ("got string, want integer"). Nothing was written and the caller's
// transaction is still usable.
//
// # Versioning
//
// Message.SchemaVersion travels with the event (0 means 1), so consumers can
// tell the shapes apart. A registered schema is fixed: when the payload's
// shape changes, bump SchemaVersion in the producer and register the new
// schema next to the old one, which stays registered for as long as
// producers may still send it.
//
// # What is checked
//
// Only payloads whose ContentType is JSON (empty, application/json, or any
// type ending in +json such as application/cloudevents+json) are checked, and
// only when a schema is registered for the message's (Type, SchemaVersion);
// other messages pass. Set Registry.Strict to refuse those instead.
//
// Schemas follow JSON Schema draft 2020-12 unless they name another draft in
// "$schema" (drafts 4, 6, 7 and 2019-09 are understood). "format" is
// asserted (a "uuid" or "date-time" that does not parse is refused). Schemas
// are self-contained: a "$ref" to another document is not fetched; put shared
// parts under "$defs". Validation is done by
// github.com/santhosh-tekuri/jsonschema/v6.
package eventschema
