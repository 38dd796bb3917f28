// Package amqpbroker publishes outbox events to RabbitMQ over AMQP 0-9-1
// (github.com/rabbitmq/amqp091-go), with publisher confirms.
//
// Each Publish call sends its batch on the Broker's own channel in confirm
// mode without waiting in between, then waits for every confirm, so a batch
// costs about one round trip. An event's result is nil only once RabbitMQ
// acked it (basic.ack) and had not returned it as unroutable first.
//
// # Message mapping
//
// Each event is published, mandatory and persistent (delivery mode 2), to
// Config.Exchange (from the URL's exchange parameter; default the default
// exchange, which routes to the queue named like the routing key) with the
// event's Topic as the routing key. The body is the payload, byte for
// byte. Properties and headers follow the binary content mode of the
// CloudEvents AMQP binding, its application properties carried as AMQP
// headers (string values):
//
//	message-id                 EventID (what consumers and dedup plugins key on)
//	type                       Type
//	timestamp                  CreatedAt (seconds; left out when zero)
//	content-type               ContentType (the datacontenttype attribute; default application/json)
//	delivery-mode              2 (persistent)
//	cloudEvents:id             EventID
//	cloudEvents:source         Config.Source (default "outbox")
//	cloudEvents:specversion    1.0
//	cloudEvents:type           Type
//	cloudEvents:time           CreatedAt, RFC 3339 in UTC (left out when zero)
//	cloudEvents:partitionkey   Key (CloudEvents partitioning extension; left out when empty)
//	cloudEvents:schemaversion  SchemaVersion (outbox extension; left out when 0)
//	cloudEvents:aggregatetype  AggregateType (outbox extension; left out when empty)
//	<user headers>             Headers, names and values as given
//
// inbox/amqpmsg reads such a delivery back into an inbox.Message. The
// names AMQP reserves (broker.ReservedHeaders(broker.AMQP): Content-Type,
// cloudEvents:* and cloudEvents_*, RabbitMQ's x-death, x-delay, CC, BCC
// and the like, JMS*) are never sent as user headers: a row carrying one
// is refused (permanent), not sent with the header dropped. Other x-
// headers (X-Request-Id) pass.
//
// # Errors
//
// Permanent (the relay buries the event at once, with the reason): an
// event that is not a valid CloudEvent or carries a header AMQP cannot send
// unchanged or reserves; a topic longer than 255 bytes (an AMQP routing
// key); a message larger than Config.MaxMessage with its headers
// (ErrTooLarge, outbox.ErrPayloadTooLarge). Broker.Check refuses the same
// at enqueue: pass it as store.Options.Check.
//
// Transient, retried by the relay with backoff: a returned message
// (ErrUnroutable: no queue is bound to the routing key; the queue may just
// not be declared yet, so the relay retries it and makes it DEAD, with the
// error naming it unroutable, after its max attempts); a nack
// (ErrNacked); no confirm before the deadline. Broker-wide, wrapping
// broker.ErrUnavailable (the relay gives the events back without counting
// an attempt): the connection or channel is down (ErrNotConnected), was
// lost with publishes unconfirmed (they count as not sent, although
// RabbitMQ may have stored them: at least once), RabbitMQ blocks publishers
// during a resource alarm, or the Broker is closed (ErrClosed).
//
// # Connection
//
// Dial opens a connection named Config.ConnectionName (the connection_name
// client property) and one channel on it; when either is lost, a background
// loop reconnects with capped, jittered backoff (100ms doubling to 5s),
// and Publish fails fast with ErrNotConnected meanwhile. amqp091-go's own
// automatic recovery is not used: a recovered channel would renumber its
// delivery tags under the publishes awaiting confirms. New publishes on a
// channel of its own on a connection the caller owns, reopening the channel
// when it is lost, but never redialling.
//
// Dial bounds every write to the socket by Config.Timeout: amqp091-go
// writes a publish straight to the socket with no deadline, so a server
// that stopped reading (a network that drops everything) would otherwise
// hold Publish, and the relay's claim, until the heartbeat gave up; a write
// that cannot finish closes the connection instead, which the Broker
// re-establishes.
//
// A returned message is tied to its confirm by its message-id (a
// basic.return carries no delivery tag), so a channel never has two
// publishes of one event id unconfirmed at once: the second gets a
// transient error and the relay retries it.
//
// # Ordering
//
// RabbitMQ delivers the messages one channel publishes to one queue in
// publish order, so a key's events arrive in order when they are
// confirmed in order. It does not hold a key's later messages back when an
// earlier one is returned, nacked or lost with the connection, so Features
// declares broker.OrderNone: the relay sends a key's next event only after
// the previous one was confirmed.
//
// # Queues
//
// The Broker declares nothing: which queues exist, and what they keep, is
// the operator's choice. EnsureQueue (and `outbox broker setup --queue`)
// declares a durable queue and binds it to the exchange for the topics.
// RabbitMQ has no deduplication of its own (without a plugin); consumers
// drop the duplicates that at-least-once delivery makes with the inbox
// package, keyed by message-id / cloudEvents:id.
package amqpbroker
