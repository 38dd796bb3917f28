// Package kafkabroker publishes outbox events to Kafka with franz-go's
// producer (github.com/twmb/franz-go/pkg/kgo).
//
// Each Publish call hands the whole batch to the producer in slice order
// and then waits for every acknowledgement, so a batch costs about one
// round trip per partition leader; the result for each event is nil only
// once Kafka has stored it on all in-sync replicas (acks=all).
//
// # Delivery and order
//
// The producer is franz-go's idempotent one (its default, which New and
// Dial insist on): Kafka drops the duplicates of its own retries, and a
// partition stores one producer's records in the order they were
// produced. The record key is the event's Key, so with Kafka's default
// partitioner (murmur2, as the Java client) a key's events all go to one
// partition and keep their order there; keyless events are spread by
// franz-go's sticky partitioner. A re-publish after a relay crash is a
// new record, not a retry, so a consumer sees it twice: the inbox package
// drops the second copy by its ce_id.
//
// The adapter declares the ordering unit broker.OrderPartition. When Kafka
// refuses a record, franz-go fails every record buffered behind it on the
// same partition, whatever their keys, so that no later record of the
// partition is stored before it. The first failed record of a partition
// in a call keeps its error; the later ones failed only behind it and are
// reported with broker.ErrNotAttempted, which the relay releases without
// counting an attempt. An event the adapter refuses itself, before
// sending (see Errors), never reaches the producer and fails nothing
// else, except the later events of its own key in the call, which are not
// produced (ErrNotAttempted). The same holds for a key whose event failed
// at Kafka while the call was still handing records to the producer.
// There is one narrow window this cannot close: if Kafka's refusal of a
// record arrives between the adapter handing two records of its key to
// the producer, and before franz-go reported it, the later record starts a
// new batch and may be stored; the relay then retries the earlier one
// after it. It needs a record-level refusal (INVALID_RECORD, a topic
// whose max.message.bytes is below max_message) inside the few
// microseconds a call takes to hand over a key's records; transient
// errors are retried by franz-go itself and do not open it.
//
// # Record mapping
//
// The record's topic is the event's Topic, its value the payload byte for
// byte (an empty payload is an empty value, never a tombstone), its key
// the event's Key (no key when empty), its timestamp the time of
// publishing (so a retried old event is not subject to retention at once;
// ce_time keeps the event's creation time). Headers, following the binary
// content mode of the CloudEvents Kafka protocol binding (UTF-8 values,
// not percent-encoded):
//
//	ce_id             EventID
//	ce_source         Config.Source (default "outbox")
//	ce_specversion    1.0
//	ce_type           Type
//	ce_time           CreatedAt, RFC 3339 in UTC (left out when zero)
//	content-type      ContentType (default application/json): datacontenttype
//	ce_schemaversion  SchemaVersion (outbox extension; left out when 0)
//	ce_aggregatetype  AggregateType (outbox extension; left out when empty)
//	<user headers>    Headers, names and values as given
//
// The partitionkey extension is the record key, as the binding maps it,
// and is not repeated in a header. inbox/kafkamsg reads all of this back.
//
// User headers are sent unchanged. The names Kafka reserves
// (broker.ReservedHeaders(broker.Kafka): Content-Type, ce_*, Spring's
// kafka_* and __TypeId__) are never sent as user headers: they would
// switch a CloudEvents reader to structured mode, overwrite the event's
// identity, or steer a Spring consumer. outbox.Validate refuses them at
// Enqueue; a row written by plain SQL that carries one is refused
// (permanent), not sent with the header dropped.
//
// # Errors
//
// Permanent (the relay buries the event at once, with the reason): a topic
// that does not exist (ErrTopicNotFound, confirmed by asking the cluster's
// metadata again, so a topic whose leader is merely moving is not
// mistaken for a missing one); a record too large (larger than
// Config.MaxMessage with its key, headers and batch framing, refused
// before sending and wrapping outbox.ErrPayloadTooLarge; or refused by
// Kafka as MESSAGE_TOO_LARGE when its record alone is above the topic's
// max.message.bytes, which the adapter looks up); INVALID_RECORD,
// CORRUPT_MESSAGE, INVALID_TIMESTAMP; an illegal topic name
// (ErrInvalidTopic); an event that is not a valid CloudEvent or carries a
// header Kafka cannot send unchanged or reserves (broker.CheckCloudEvent,
// broker.CheckHeaders).
//
// Broker.Check (broker.Checker) refuses the topic and size problems at
// enqueue, where the producer can still fix them: pass it as
// store.Options.Check.
//
// Everything else is transient and retried by the relay: no
// acknowledgement before the deadline (Config.Timeout; it wraps
// broker.ErrUnavailable when no broker of the cluster answers a ping
// either, so that an outage of any length costs no attempts), a batch Kafka
// refused as too large although each record fits (the error says to lower
// max_message to the topic's max.message.bytes), not being allowed to
// write the topic, a closed client (broker.ErrUnavailable). franz-go
// retries retriable errors (leader moves, NOT_ENOUGH_REPLICAS, lost
// connections) inside the deadline by itself.
//
// # Client and topics
//
// Dial builds and owns a client from a URL (see Dial for the query
// options); New wraps a *kgo.Client the caller built and keeps closing,
// refusing one that disables idempotence, flushes manually, is
// transactional or does not wait for all in-sync replicas. kafkabroker
// creates no topics and does not let franz-go ask for their automatic
// creation: how many partitions a topic has, which decides how far its
// keys spread, is the operator's choice (EnsureTopics, or `outbox broker
// setup --broker kafka://… --topics orders`).
package kafkabroker
