package kafkabroker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// record builds e's Kafka record in the CloudEvents Kafka binding's
// binary mode, after checking that e can be sent unchanged. attrs is
// scratch space reused across a batch.
func (b *Broker) record(e *outbox.Event, attrs *[]broker.Attribute) (*kgo.Record, error) {
	if err := broker.CheckEvent(broker.Kafka, e); err != nil {
		return nil, fmt.Errorf("kafkabroker: event %s: %w", e.EventID, err)
	}
	if why := topicProblem(e.Topic); why != "" {
		return nil, fmt.Errorf("kafkabroker: event %s: topic %q: %w: %s", e.EventID, e.Topic, ErrInvalidTopic, why)
	}
	*attrs = broker.AppendCloudEventAttributes((*attrs)[:0], e, b.cfg.Source)
	hs := make([]kgo.RecordHeader, 0, len(*attrs)+len(e.Headers))
	for _, a := range *attrs {
		switch a.Name {
		case broker.AttrPartitionKey:
			continue // the record key carries it, as the binding says
		case broker.AttrDataContentType:
			hs = append(hs, kgo.RecordHeader{Key: ContentTypeHeader, Value: []byte(a.Value)})
		default:
			hs = append(hs, kgo.RecordHeader{Key: attrHeader(a.Name), Value: []byte(a.Value)})
		}
	}
	for k, v := range e.Headers {
		hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	r := &kgo.Record{Topic: e.Topic, Value: e.Payload, Headers: hs}
	if r.Value == nil {
		r.Value = []byte{} // an empty payload, not a tombstone
	}
	if e.Key != "" {
		r.Key = []byte(e.Key)
	}
	if size := batchSize(r); size > b.cfg.MaxMessage {
		return nil, tooLarge(e, size, b.cfg.MaxMessage)
	}
	return r, nil
}

// batchSize is recordSize for a record already built.
func batchSize(r *kgo.Record) int {
	n := 3
	if r.Key == nil {
		n += varintLen(-1)
	} else {
		n += varintLen(len(r.Key)) + len(r.Key)
	}
	n += varintLen(len(r.Value)) + len(r.Value) + varintLen(len(r.Headers))
	for _, h := range r.Headers {
		n += varintLen(len(h.Key)) + len(h.Key) + varintLen(len(h.Value)) + len(h.Value)
	}
	return batchOverhead + varintLen(n) + n
}

// attrHeader returns the header name of a CloudEvents attribute, without
// allocating for the fixed ones.
func attrHeader(name string) string {
	switch name {
	case broker.AttrID:
		return "ce_id"
	case broker.AttrSource:
		return "ce_source"
	case broker.AttrSpecVersion:
		return "ce_specversion"
	case broker.AttrType:
		return "ce_type"
	case broker.AttrTime:
		return "ce_time"
	case broker.AttrSchemaVersion:
		return "ce_schemaversion"
	case broker.AttrAggregateType:
		return "ce_aggregatetype"
	}
	return HeaderPrefix + name
}

// batchOverhead is the size of a record batch holding no records, as
// franz-go counts it against ProducerBatchMaxBytes, plus slack for the
// framing of older produce versions.
const batchOverhead = 61 + 16

// recordSize is the size of a batch holding e's record alone, as
// franz-go encodes it (varint lengths, headers included), plus slack: what
// Config.MaxMessage bounds.
func recordSize(e *outbox.Event, source string) int {
	if source == "" {
		source = broker.SourceDefault
	}
	n := 3 // attributes, timestamp delta 0, offset delta 0
	if e.Key == "" {
		n += varintLen(-1)
	} else {
		n += varintLen(len(e.Key)) + len(e.Key)
	}
	n += varintLen(len(e.Payload)) + len(e.Payload)
	headers := len(e.Headers)
	add := func(k, v int) {
		n += varintLen(k) + k + varintLen(v) + v
	}
	for k, v := range e.Headers {
		add(len(k), len(v))
	}
	var scratch [9]broker.Attribute
	for _, a := range broker.AppendCloudEventAttributes(scratch[:0], e, source) {
		switch a.Name {
		case broker.AttrPartitionKey:
			continue
		case broker.AttrDataContentType:
			add(len(ContentTypeHeader), len(a.Value))
		default:
			add(len(HeaderPrefix)+len(a.Name), len(a.Value))
		}
		headers++
	}
	n += varintLen(headers)
	return batchOverhead + varintLen(n) + n
}

// varintLen is the length of n as a zig-zag varint, Kafka's record
// encoding.
func varintLen(n int) int {
	u := uint64(n<<1) ^ uint64(n>>63)
	l := 1
	for u >= 0x80 {
		u >>= 7
		l++
	}
	return l
}

// tooLarge is the error of an event whose record does not fit
// Config.MaxMessage.
func tooLarge(e *outbox.Event, size, limit int) error {
	return broker.Permanentf("kafkabroker: event %s: its %d-byte payload with its key and headers makes a %d-byte record batch, above the limit of %d (Config.MaxMessage / max_message) (%w); store large data elsewhere and send a reference, or raise max_message together with the topic's max.message.bytes; check events at enqueue with Broker.Check as store.Options.Check",
		e.EventID, len(e.Payload), size, limit, outbox.ErrPayloadTooLarge)
}

// topicProblem returns why s is not a legal Kafka topic name, or "".
func topicProblem(s string) string {
	switch {
	case s == "":
		return "it is empty"
	case s == "." || s == "..":
		return "Kafka does not allow \".\" or \"..\" as a topic name"
	case len(s) > 249:
		return fmt.Sprintf("it is %d characters long; Kafka allows at most 249", len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("byte %d (%q) is not allowed; Kafka topic names hold only ASCII letters, digits, '.', '_' and '-'", i, c)
		}
	}
	return ""
}

// topicMaxMessage returns topic's max.message.bytes as the cluster reports
// it, or 0 when it cannot be learned; answers are kept for a minute.
func (b *Broker) topicMaxMessage(ctx context.Context, topic string) int {
	b.limitsMu.Lock()
	l, ok := b.limits[topic]
	b.limitsMu.Unlock()
	if ok && time.Since(l.at) < time.Minute {
		return l.bytes
	}
	lctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		lctx, cancel = context.WithTimeout(context.Background(), b.cfg.Timeout/2)
		defer cancel()
	}
	rcs, err := b.adm.DescribeTopicConfigs(lctx, topic)
	if err != nil {
		return 0
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		return 0
	}
	for _, c := range rc.Configs {
		if c.Key == "max.message.bytes" && c.Value != nil {
			n, err := strconv.Atoi(*c.Value)
			if err != nil {
				return 0
			}
			b.limitsMu.Lock()
			if b.limits == nil {
				b.limits = map[string]topicLimit{}
			}
			b.limits[topic] = topicLimit{bytes: n, at: time.Now()}
			b.limitsMu.Unlock()
			return n
		}
	}
	return 0
}

type topicLimit struct {
	bytes int
	at    time.Time
}

// longestTime formats as the longest ce_time value, so Check can size an
// event before its creation time is known.
var longestTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)

var _ broker.Checker = (*Broker)(nil)

// Check reports, before m is enqueued, whether the Broker can deliver it:
// its topic must be a legal Kafka topic name, its headers sendable over
// Kafka unchanged, and its record (payload, key, CloudEvents and user
// headers, counted as franz-go encodes them, with ce_time at its longest)
// must fit Config.MaxMessage. It implements broker.Checker: use it as
// store.Options.Check. Errors are *outbox.ValidationError.
func (b *Broker) Check(m outbox.Message) error {
	if why := topicProblem(m.Topic); why != "" {
		return &outbox.ValidationError{Field: "Topic", Err: ErrInvalidTopic, Fix: why}
	}
	if err := broker.CheckHeaders(broker.Kafka, m.Headers); err != nil {
		return &outbox.ValidationError{Field: "Headers", Err: err, Fix: "rename or remove the header"}
	}
	e := outbox.Event{Message: m, CreatedAt: longestTime}
	if e.EventID == "" {
		e.EventID = "00000000-0000-0000-0000-000000000000" // the length of the one the store will set
	}
	if size := recordSize(&e, b.cfg.Source); size > b.cfg.MaxMessage {
		over := size - len(m.Payload)
		return &outbox.ValidationError{Field: "Payload", Err: outbox.ErrPayloadTooLarge, Fix: fmt.Sprintf(
			"with its key, headers and framing (%d bytes) its Kafka record batch takes %d bytes, above the adapter's max_message of %d; keep the payload to %d bytes (store large data elsewhere and send a reference), or raise max_message together with the topic's max.message.bytes",
			over, size, b.cfg.MaxMessage, max(b.cfg.MaxMessage-over, 0))}
	}
	return nil
}
