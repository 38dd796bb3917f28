// Package natsbroker publishes outbox events to NATS JetStream.
//
// Each Publish call sends the whole batch asynchronously on one connection
// and then waits for every PubAck, so a batch costs about one round trip;
// the result for each event is nil only once JetStream has stored it.
//
// # Message mapping
//
// The subject is the event's Topic; the body is the payload, byte for byte.
// Headers, following the binary content mode of the CloudEvents NATS
// protocol binding (values percent-encoded as the binding requires, so
// plain identifiers arrive unchanged):
//
//	Nats-Msg-Id         EventID (JetStream's duplicate detection)
//	ce-id               EventID
//	ce-source           Config.Source (default "outbox")
//	ce-specversion      1.0
//	ce-type             Type
//	ce-time             CreatedAt, RFC 3339 in UTC (left out when zero)
//	ce-datacontenttype  ContentType (default application/json)
//	ce-partitionkey     Key (CloudEvents partitioning extension; left out when empty)
//	ce-schemaversion    SchemaVersion (outbox extension; left out when 0)
//	ce-aggregatetype    AggregateType (outbox extension; left out when empty)
//	<user headers>      Headers, names and values as given
//
// User headers are sent unchanged. The names NATS reserves
// (broker.ReservedHeaders(broker.NATS): Content-Type, ce-*, Nats-*, Status,
// Description) are never sent as user headers: they would switch a
// CloudEvents reader to structured mode, overwrite the event's identity,
// steer JetStream, or make nats.go take the message for a control message.
// outbox.Validate refuses them at Enqueue; a row written by plain SQL that
// carries one is refused (permanent), not sent with the header dropped.
//
// # Errors
//
// Permanent (the relay buries the event at once, with the reason): no
// JetStream stream captures the subject (ErrNoStream, confirmed by asking
// JetStream, so a stream that is merely restarting is not mistaken for a
// missing one); a payload that does not fit the server's max_payload
// together with its headers (wrapping nats.ErrMaxPayload and
// outbox.ErrPayloadTooLarge), or the stream's max_msg_size; a topic that is
// not a subject one can publish to (ErrInvalidSubject: empty, a space or
// control character, an empty token, a * or > wildcard token); an event
// that is not a valid CloudEvent or carries a header NATS cannot send
// unchanged or reserves (broker.CheckCloudEvent, broker.CheckHeaders).
//
// Broker.Check (broker.Checker) refuses the topic and size problems at
// enqueue, where the producer can still fix them: pass it as
// store.Options.Check. It counts the headers the event will carry, so a
// payload of exactly max_payload (1 MiB by default, the store's default
// limit too) is refused there instead of going DEAD at the relay.
//
// Everything else is transient and retried by the relay: a missing PubAck
// at the deadline, a lost connection, a closed Broker (ErrClosed).
//
// Broker.Close waits for the Publish calls in progress until its ctx ends,
// then drops the reply subscription. A call still waiting for PubAcks
// then returns at once, not at its deadline: the PubAcks already received
// count, and every other event of the call fails with ErrClosed (it may or
// may not be stored: at-least-once, so the relay publishes it again), on a
// connection the caller owns as on one Dial opened and Close closes.
//
// # How a batch is published
//
// Publish uses the core nats.go client and does by hand the small part of
// an asynchronous JetStream publisher it needs. jetstream.PublishMsgAsync
// keeps a future per message (an entry in a table shared by the whole
// connection under one mutex, a timeout timer, channels to wait on); for
// batches of a thousand that bookkeeping cost more than building the
// messages (BENCHMARKS.md, "Broker adapters against their raw
// clients"). Instead the Broker keeps one reply subscription, to
// <inbox>.*.* (made at the first Publish, renewed by nats.go after a
// reconnect, dropped by Close); each Publish call registers under a
// number of its own, <call>, and publishes every message of one topic
// with the same reply subject,
// <inbox>.<call>.<topic's index in the batch>; replies for a call that
// ended are dropped. (A subscription per call cost a SUB and an UNSUB to
// nats-server and a goroutine in nats.go for every Publish: most of the
// cost of a one-event call, which is what the relay makes for one hot
// key.) One goroutine per Broker checks the connection every 50 ms while
// calls are in flight, so that a call whose connection was lost, or
// reconnected, fails at once as not connected instead of waiting for
// PubAcks that will never come. A call counts each topic's "stored"
// PubAcks: when they are as many as the messages it sent on that topic,
// all of them were stored. Any other reply on a topic (an error, a "no
// responders") names no message, so that topic's events are sent again
// with a reply subject each, <inbox>.<call>.<index in the batch>, which
// tells every event's error apart (a "no responders" is then looked into
// with a stream lookup after the call, off the shared subscription);
// JetStream's deduplication on Nats-Msg-Id makes the second sending of the
// events it had stored a no-op that answers "duplicate". Nothing depends on
// the order PubAcks come in. One reply subject per topic instead of per
// message saved nats-server about 1 µs of CPU per message (it routes each
// new reply subject), which raised the relay's drain rate by about 7 %.
// A reply is a PubAck, an error (decoded with encoding/json into
// jetstream.APIError), or a "no responders" status. Only a PubAck in the
// exact form nats-server writes
// for a stored message ({"stream":"NAME", "seq":N}, no "error" in it) is
// taken without decoding; anything else is decoded in full. Config.MaxPending
// is kept by a counter shared by concurrent calls, and a call waiting for
// PubAcks looks at the connection every 50ms, so that events whose acks
// were lost with the connection fail at once (ErrNotConnected, transient)
// instead of at the deadline. Stream lookups and the account check stay
// with the jetstream package.
//
// # Connection
//
// Dial opens and owns a connection that reconnects forever with capped,
// jittered backoff and buffers nothing while disconnected, so a broker
// restart heals by itself and Publish fails fast (ErrNotConnected) during
// the outage instead of waiting for its deadline. New wraps a connection
// the caller already has; the caller keeps owning it.
//
// # Streams
//
// natsbroker creates no streams: which subjects are persisted, for how
// long and with which duplicate window is the operator's decision (for
// example `nats stream add ORDERS --subjects 'orders.>'`). JetStream drops
// a repeated Nats-Msg-Id only within the stream's duplicate window (two
// minutes by default); consumers deduplicate the rest with the inbox
// package.
//
// Reading the headers back into an event on the consumer side is not this
// package's job; it lives with the consumer (the inbox package).
package natsbroker
