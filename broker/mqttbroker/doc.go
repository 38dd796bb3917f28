// Package mqttbroker publishes outbox events to an MQTT 5 server (Mosquitto,
// EMQX, HiveMQ, …) at QoS 1 with github.com/eclipse/paho.golang.
//
// An event's result is nil only once the server's PUBACK came with a
// reason code below 0x80: 0x00, or 0x10 ("no matching subscribers": the
// server took the message, nobody was subscribed; MQTT keeps no message
// for later subscribers unless it is retained, which the relay never asks
// for).
//
// # Message mapping
//
// The topic is the event's Topic; the payload is the event's, byte for
// byte. Properties follow the binary content mode of the CloudEvents MQTT
// binding, which names its user properties exactly like the attributes:
//
//	Content Type     ContentType (the datacontenttype attribute; default application/json)
//	id               EventID (user property; what consumers deduplicate on)
//	source           Config.Source (default "outbox")
//	specversion      1.0
//	type             Type
//	time             CreatedAt, RFC 3339 in UTC (left out when zero)
//	partitionkey     Key (CloudEvents partitioning extension; left out when empty)
//	schemaversion    SchemaVersion (outbox extension; left out when 0)
//	aggregatetype    AggregateType (outbox extension; left out when empty)
//	<user headers>   Headers, as user properties, names and values as given
//
// inbox/mqttmsg reads such a message back into an inbox.Message. The names
// MQTT reserves (broker.ReservedHeaders(broker.MQTT): Content-Type and the
// CloudEvents attribute names id, source, type, time, subject, …) are
// never sent as user headers, since a reader would take them for the
// attributes: a row carrying one is refused (permanent), not sent with the
// header dropped.
//
// # Errors
//
// Permanent (the relay buries the event at once, with the reason): a
// topic that is not an MQTT topic name one can publish to (ErrInvalidTopic:
// empty, a + or # wildcard, a control character); a PUBLISH packet larger
// than the server's Maximum Packet Size (ErrTooLarge, with
// outbox.ErrPayloadTooLarge; sending it would make the server drop the
// connection); an event that is not a valid CloudEvent or carries a header
// MQTT cannot send unchanged or reserves; a PUBACK saying 0x87 not
// authorized, 0x90 topic name invalid, 0x95 packet too large or 0x99
// payload format invalid (ErrRefused). Broker.Check refuses the topic,
// header and size problems at enqueue: pass it as store.Options.Check.
//
// Transient: other PUBACK failures (0x80, 0x83, 0x97 quota exceeded, …);
// no PUBACK before the deadline; a key's later events, not sent after an
// earlier one failed. Broker-wide, wrapping broker.ErrUnavailable: not
// connected (ErrNotConnected), the connection lost with PUBACKs still
// awaited (ErrConnectionLost: those events count as not sent, though the
// server may have taken them: at least once), or the Broker closed
// (ErrClosed).
//
// # Sessions and reconnecting
//
// Dial connects with Clean Start and a Session Expiry Interval of 0, with
// Config.ClientID (random by default, so two relays never take over each
// other's connection). The server keeps no session of the relay's: the
// outbox table is the durable copy of every event not yet acknowledged,
// and a session held in the relay's memory would be lost with the relay
// anyway. When the connection ends, every event awaiting its PUBACK fails
// at once as ErrConnectionLost and the relay sends it again; a background
// loop reconnects with capped, jittered backoff (100ms doubling to 5s),
// and Publish fails fast with ErrNotConnected meanwhile. New publishes
// with a connected paho.Client the caller owns, and cannot reconnect it.
//
// # Ordering: what MQTT does and does not guarantee
//
// MQTT 5 (section 4.6) has the server forward the QoS 1 messages one
// client publishes to one topic in the order it received them, to each
// subscriber of that topic whose subscription is QoS 1 or more. It does
// not order messages across topics, nor across connections (a relay's
// reconnect, several relays), and a subscriber can see a message again
// after its own reconnect (QoS 1 is at least once). A shared subscription
// ($share/…) spreads one topic's messages over several consumers, so no
// single consumer sees them all in order. A refused PUBLISH (quota
// exceeded) does not keep the server from taking the next one.
//
// A Publish call writes its events' PUBLISH packets in slice order on its
// one connection, so events of one topic reach a subscriber in that order
// (when it subscribes at QoS 1 without a shared subscription; it drops the
// repeats its reconnects bring with the inbox package). A refused or lost
// event does not keep the server from taking the next one, so Features
// declares broker.OrderNone and the relay sends a key's next event only
// after the previous one was confirmed.
//
// # How a batch is published
//
// paho's Publish waits for one PUBACK at a time, and its asynchronous send
// reports none. With Dial's connection the Broker gives paho a session
// (paho's in-memory state) that hands each PUBLISH's PUBACK to a channel of
// the Broker's: one goroutine writes the batch in order, as fast as the
// server's Receive Maximum allows, and then the PUBACKs are collected.
// New's client was built by the caller, with a session of its own, so
// there events go one at a time.
package mqttbroker
