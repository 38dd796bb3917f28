// Package rocketmqbroker publishes outbox events to Apache RocketMQ with
// rocketmq-client-go (github.com/apache/rocketmq-client-go/v2).
//
// It is a module of its own (github.com/outbox-go/outbox/broker/rocketmqbroker),
// so that the RocketMQ client and its dependencies burden only the programs
// that import it. The outbox command, a module of its own too, carries it:
// outbox relay --broker rocketmq://nameserver:9876 runs a relay through it;
// a program of yours builds one with relay.New and this package's Broker.
//
// # Delivery and order
//
// Every event is sent with SendSync: its result is nil only once the broker
// answered SEND_OK. The sharding key is the event's Key, and Dial installs
// rocketmq-client-go's hash queue selector, which puts every message of a
// sharding key on the same queue (also when the producer retries a send),
// so a queue holds a key's events in the order they were sent. Within one
// Publish call a key's events are sent one after another, and once one
// fails its later events are not sent (broker.ErrNotAttempted): the
// adapter declares broker.OrderKey. Different keys, and keyless events,
// are sent in parallel, up to Config.MaxInFlight at once. A retried send
// can store a message twice (RocketMQ has no producer-side deduplication);
// consumers drop the copy by its key or CE_id with the inbox package.
//
// # Message mapping
//
// Topic = Topic; body = the payload, byte for byte; keys (the KEYS
// property, which RocketMQ indexes for queries) = EventID; sharding key =
// Key. Properties follow the binary mode of the CloudEvents RocketMQ
// binding draft, CE_ and the CloudEvents 1.0 attribute name:
//
//	CE_id, CE_source, CE_specversion, CE_type, CE_time (RFC 3339, UTC),
//	CE_datacontenttype (default application/json), CE_schemaversion,
//	CE_aggregatetype, and the user headers, names and values as given
//
// A user header that names a RocketMQ system property (KEYS, TAGS, DELAY,
// TIMER_DELIVER_MS, SHARDING_KEY, UNIQ_KEY, …, in any case), Content-Type,
// or starts with CE_ or ce- is refused (permanent), as is a header with an
// empty value (rocketmq-client-go drops such a property and the Java
// client refuses one): the event would otherwise arrive without it.
//
// # Errors
//
// rocketmq-client-go reports the broker's refusals as text ("CODE: 17,
// DESC: …"); the adapter reads the code. Permanent: TOPIC_NOT_EXIST (17,
// ErrTopicNotFound), MESSAGE_ILLEGAL (13), a message above Config.MaxMessage
// (body and properties together, 4 MiB by default, RocketMQ's default
// maxMessageSize; outbox.ErrPayloadTooLarge), properties above 32,767
// bytes, an illegal topic name (ErrInvalidTopic), an invalid CloudEvent or
// header. Transient: SYSTEM_BUSY, SYSTEM_ERROR, SERVICE_NOT_AVAILABLE,
// NO_PERMISSION, no route to the topic, a send result other than SEND_OK
// (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE: the
// message may be stored, but not as durably as the broker is configured
// to confirm), a deadline, a lost connection; a stopped producer or a
// closed Broker is broker.ErrUnavailable.
//
// # What was verified
//
// No RocketMQ server can run where this package was built. Its tests hold
// the mapping, the per-key order and held-back events, and the error
// classification to the behaviour above with a fake Sender that answers
// as rocketmq-client-go does (its SendResult, its error texts and
// variables), and check that the client's hash queue selector keeps a
// sharding key on one queue. Not verified against a broker: that a real
// broker answers each case with the codes assumed here, the size and
// property limits, and delivery end to end.
package rocketmqbroker
