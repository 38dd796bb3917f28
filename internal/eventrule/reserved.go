package eventrule

import "strings"

// Transport is a set of transports, as bits.
type Transport uint8

// The transports with a CloudEvents binding whose reserved header names are
// known here.
const (
	NATS Transport = 1 << iota
	Kafka
	AMQP
	HTTP
	Redis
	MQTT

	All = NATS | Kafka | AMQP | HTTP | Redis | MQTT
)

// Names returns the transports in t, for messages: "NATS", "NATS and HTTP",
// "all transports".
func (t Transport) Names() string {
	if t == All {
		return "all transports"
	}
	var names []string
	for _, x := range []struct {
		bit  Transport
		name string
	}{{NATS, "NATS"}, {Kafka, "Kafka"}, {AMQP, "AMQP"}, {HTTP, "HTTP"}, {Redis, "Redis"}, {MQTT, "MQTT"}} {
		if t&x.bit != 0 {
			names = append(names, x.name)
		}
	}
	switch len(names) {
	case 0:
		return "no transport"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// Rule is one reserved header name, or prefix of names.
type Rule struct {
	Name   string    // lower-case; matched ignoring ASCII case
	Prefix bool      // Name is a prefix: every name starting with it is reserved
	Owners Transport // the transports that reserve it
	Why    string    // what the transport does with it
	Fix    string    // what to do instead
}

// Matches reports whether name falls under r, ignoring ASCII case.
func (r *Rule) Matches(name string) bool {
	if r.Prefix {
		return len(name) >= len(r.Name) && strings.EqualFold(name[:len(r.Name)], r.Name)
	}
	return len(name) == len(r.Name) && strings.EqualFold(name, r.Name)
}

// mqttAttr is why MQTT reserves the CloudEvents attribute names.
const mqttAttr = "the CloudEvents MQTT binding carries the event's attributes as MQTT 5 user properties named exactly like them (id, source, type, time, …), which the relay sets from the event; a user property of the same name would be read as the attribute"

const (
	fixRename   = "choose another name"
	fixAttr     = "set the Message field it stands for (Type, Key, ContentType, …), or choose another name"
	fixSetByLib = "the adapter sets it itself; choose another name"
)

// Rules lists every reserved name, grouped by what reserves it.
var Rules = []Rule{
	{Name: "content-type", Owners: All,
		Why: "the event's content type travels as its datacontenttype attribute (Message.ContentType); a Content-Type header next to the CloudEvents attributes switches a CloudEvents reader to structured mode",
		Fix: "set Message.ContentType instead"},

	{Name: "ce-", Prefix: true, Owners: NATS | HTTP,
		Why: "the CloudEvents NATS and HTTP bindings carry the event's attributes (ce-id, ce-type, …) in ce- headers, which the relay sets from the event", Fix: fixAttr},
	{Name: "ce_", Prefix: true, Owners: Kafka,
		Why: "the CloudEvents Kafka binding carries the event's attributes (ce_id, ce_type, …) in ce_ headers, which the relay sets from the event", Fix: fixAttr},
	{Name: "cloudevents:", Prefix: true, Owners: AMQP,
		Why: "the CloudEvents AMQP binding carries the event's attributes in cloudEvents: properties, which the relay sets from the event", Fix: fixAttr},
	{Name: "cloudevents_", Prefix: true, Owners: AMQP,
		Why: "the CloudEvents AMQP binding's JMS spelling (cloudEvents_id, …) carries the event's attributes", Fix: fixAttr},

	// The CloudEvents MQTT binding names its user properties exactly like
	// the attributes, with no prefix: every attribute name is taken.
	{Name: "id", Owners: MQTT, Why: mqttAttr, Fix: fixAttr},
	{Name: "source", Owners: MQTT, Why: mqttAttr, Fix: fixAttr},
	{Name: "specversion", Owners: MQTT, Why: mqttAttr, Fix: fixAttr},
	{Name: "type", Owners: MQTT, Why: mqttAttr, Fix: fixAttr},
	{Name: "time", Owners: MQTT, Why: mqttAttr, Fix: fixAttr},
	{Name: "subject", Owners: MQTT, Why: mqttAttr, Fix: fixAttr},
	{Name: "dataschema", Owners: MQTT, Why: mqttAttr, Fix: fixAttr},
	{Name: "datacontenttype", Owners: MQTT, Why: mqttAttr, Fix: fixAttr},
	{Name: "partitionkey", Owners: MQTT, Why: mqttAttr, Fix: fixAttr},
	{Name: "schemaversion", Owners: MQTT, Why: mqttAttr, Fix: fixAttr},
	{Name: "aggregatetype", Owners: MQTT, Why: mqttAttr, Fix: fixAttr},

	{Name: "nats-", Prefix: true, Owners: NATS,
		Why: "JetStream acts on Nats-* headers (Nats-Msg-Id deduplication, Nats-Expected-*, Nats-Rollup, Nats-TTL, …)", Fix: fixRename},
	{Name: "status", Owners: NATS,
		Why: "nats.go takes a message with a Status header for a control message (no responders, heartbeat, flow control), and a consumer of the subject stalls on it", Fix: fixRename},
	{Name: "description", Owners: NATS,
		Why: "nats.go reads a Description header as the text of a control message's status", Fix: fixRename},

	{Name: "kafka_", Prefix: true, Owners: Kafka,
		Why: "Spring for Apache Kafka keeps its own headers under kafka_ and its consumers act on them", Fix: fixRename},
	{Name: "__typeid__", Owners: Kafka,
		Why: "Spring's JsonDeserializer picks the class it decodes the value into from __TypeId__", Fix: fixRename},
	{Name: "__keytypeid__", Owners: Kafka,
		Why: "Spring's JsonDeserializer picks the class it decodes the key into from __KeyTypeId__", Fix: fixRename},
	{Name: "__contenttypeid__", Owners: Kafka,
		Why: "Spring's JsonDeserializer picks a container's element class from __ContentTypeId__", Fix: fixRename},
	{Name: "spring_json_header_types", Owners: Kafka,
		Why: "Spring's header mapper decodes the other headers by the types listed in spring_json_header_types", Fix: fixRename},

	{Name: "x-death", Owners: AMQP, Why: "RabbitMQ records a message's dead-lettering history in x-death", Fix: fixRename},
	{Name: "x-first-death-", Prefix: true, Owners: AMQP, Why: "RabbitMQ records a message's first dead-lettering in x-first-death-*", Fix: fixRename},
	{Name: "x-last-death-", Prefix: true, Owners: AMQP, Why: "RabbitMQ records a message's last dead-lettering in x-last-death-*", Fix: fixRename},
	{Name: "x-delay", Owners: AMQP, Why: "RabbitMQ's delayed-message exchange holds a message back by its x-delay", Fix: fixRename},
	{Name: "x-received-from", Owners: AMQP, Why: "RabbitMQ federation records a message's path in x-received-from", Fix: fixRename},
	{Name: "x-shovelled", Owners: AMQP, Why: "RabbitMQ shovels mark what they moved with x-shovelled", Fix: fixRename},
	{Name: "x-shovelled-timestamp", Owners: AMQP, Why: "RabbitMQ shovels mark what they moved with x-shovelled-timestamp", Fix: fixRename},
	{Name: "x-stream-filter-value", Owners: AMQP, Why: "RabbitMQ streams filter messages on x-stream-filter-value", Fix: fixRename},
	{Name: "x-deduplication-header", Owners: AMQP, Why: "RabbitMQ's message deduplication plugin drops messages by x-deduplication-header", Fix: fixRename},
	{Name: "cc", Owners: AMQP, Why: "RabbitMQ routes a copy of the message to each routing key listed in CC (sender-selected distribution)", Fix: fixRename},
	{Name: "bcc", Owners: AMQP, Why: "RabbitMQ routes a copy of the message to each routing key listed in BCC, then removes the header", Fix: fixRename},
	{Name: "jms", Prefix: true, Owners: AMQP,
		Why: "JMS reserves property names starting with JMS, and JMS brokers act on some (JMSXGroupID groups messages)", Fix: fixRename},

	{Name: "webhook-", Prefix: true, Owners: HTTP,
		Why: "Standard Webhooks signs the delivery with webhook-id, webhook-timestamp and webhook-signature", Fix: fixSetByLib},
	{Name: "content-length", Owners: HTTP, Why: "HTTP frames the body by Content-Length", Fix: fixSetByLib},
	{Name: "content-encoding", Owners: HTTP, Why: "HTTP decodes the body by Content-Encoding", Fix: fixSetByLib},
	{Name: "transfer-encoding", Owners: HTTP, Why: "HTTP frames the body by Transfer-Encoding", Fix: fixSetByLib},
	{Name: "host", Owners: HTTP, Why: "HTTP routes the request by Host", Fix: fixSetByLib},
	{Name: "connection", Owners: HTTP, Why: "Connection is an HTTP hop-by-hop header", Fix: fixSetByLib},
	{Name: "keep-alive", Owners: HTTP, Why: "Keep-Alive is an HTTP hop-by-hop header", Fix: fixSetByLib},
	{Name: "te", Owners: HTTP, Why: "TE is an HTTP hop-by-hop header", Fix: fixSetByLib},
	{Name: "trailer", Owners: HTTP, Why: "Trailer announces HTTP trailer fields", Fix: fixSetByLib},
	{Name: "upgrade", Owners: HTTP, Why: "Upgrade switches the HTTP protocol", Fix: fixSetByLib},
	{Name: "expect", Owners: HTTP, Why: "Expect changes how HTTP sends the body", Fix: fixSetByLib},
}

// byTransport holds, for each set of transports, the rules of those
// transports, so that an adapter looks only at its own few.
var byTransport = func() (out [All + 1][]*Rule) {
	for t := range out {
		for i := range Rules {
			if Rules[i].Owners&Transport(t) != 0 {
				out[t] = append(out[t], &Rules[i])
			}
		}
	}
	return out
}()

// Reserved returns the first rule of a transport in t that reserves name.
func Reserved(t Transport, name string) (*Rule, bool) {
	for _, r := range byTransport[t&All] {
		if r.Matches(name) {
			return r, true
		}
	}
	return nil, false
}
