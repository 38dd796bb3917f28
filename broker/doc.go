// Package broker is the seam a message broker adapter implements: publish a
// batch, wait for the broker's confirmation of each message, and report one
// result per message. Adapters know nothing of databases or of the relay.
//
// An adapter classifies each failure: Permanent errors (payload too large,
// unroutable, rejected) make the relay bury the event at once; anything else
// is retried with backoff; ErrUnavailable (not connected, closed) gives the
// events back without counting an attempt.
//
// Optional abilities, found by type assertion: Describer declares the
// broker's Features (its ordering unit, so the relay pipelines a key's
// events as far as the broker keeps their order after a failure and no
// further; the largest message; a bound on events in flight), and
// ResultPublisher reports what the broker said of each event (stream and
// sequence, partition and offset, duplicate), which the relay hands to its
// hooks for tracing and dashboards. broker/brokertest holds each adapter to
// exactly what it declares.
//
// # What an adapter refuses
//
// Every adapter sends each event as a valid CloudEvent in its binding's
// binary mode, with the event's user headers unchanged, or not at all.
// outbox.Validate refuses at enqueue what could not be sent that way; rows
// written by plain SQL skip it, so an adapter checks each event again as it
// builds the message and returns a Permanent error naming the field, the
// column and the fix, which the relay records as the DEAD event's reason:
//
//   - CheckCloudEvent: an event id that is not a UUID, an empty type, a
//     control character (U+0000–U+001F, U+007F–U+009F), a Unicode
//     noncharacter or invalid UTF-8 in the type, key, aggregate type or
//     content type, a negative schema version;
//   - CheckHeaders: a header name that is not an HTTP token, a value with a
//     control character or a leading or trailing space (NATS and HTTP would
//     trim it), and the names the adapter's Transport reserves.
//
// Reserved names are listed per Transport by ReservedHeaders, each with
// what the transport does with it: Content-Type everywhere (a second
// content type next to the CloudEvents attributes switches a reader to
// structured mode); the binding's attribute prefix (ce- for NATS and HTTP,
// ce_ for Kafka, cloudEvents: and cloudEvents_ for AMQP); for NATS, Nats-*
// and nats.go's Status and Description (a message with them is taken for a
// control message and stalls the consumer); for Kafka, Spring's kafka_* and
// __TypeId__ family; for AMQP, RabbitMQ's x-death, x-delay, CC, BCC and the
// like, and JMS*; for HTTP, webhook-* and the framing headers; for MQTT,
// whose binding carries the attributes as user properties without a
// prefix, the attribute names themselves (id, source, specversion, type,
// time, subject, dataschema, datacontenttype and the outbox's
// partitionkey, schemaversion and aggregatetype); for Redis nothing more
// (user headers travel as fields h:<name>, apart from the adapter's).
// Ordinary
// application headers, X-Request-Id and other x- names included, pass.
// outbox.Validate refuses the names of every transport, since the store
// does not know which broker the relay will use; an adapter refuses only
// its own, so a row carrying x-death still reaches NATS. A reserved header
// in a row is refused rather than dropped: the producer meant something by
// it, and sending the event without it would deliver something else.
//
// An adapter that knows its broker's limits (the largest message, the
// topic syntax) implements Checker, so that a store can refuse at enqueue
// what the broker would refuse (store.Options.Check); it refuses the same
// events at publish, as Permanent.
//
// Implementations live in broker/membroker (in-memory, for tests),
// broker/natsbroker and the other *broker packages; each passes the suite in
// broker/brokertest.
package broker
