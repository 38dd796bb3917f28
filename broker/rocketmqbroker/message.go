package rocketmqbroker

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// transport names RocketMQ to broker.CheckHeader, which knows no reserved
// names for it: the adapter keeps its own list (reservedProperty).
const transport broker.Transport = "rocketmq"

// systemProperties are the message property names RocketMQ itself reads
// or sets (rocketmq-client-go's primitive.Property* names and the Java
// broker's MessageConst): a user header with one of these names would
// steer the broker (DELAY, TIMER_DELIVER_MS, TRAN_MSG) or overwrite the
// event's identity (KEYS, UNIQ_KEY, SHARDING_KEY).
var systemProperties = func() map[string]bool {
	m := map[string]bool{}
	for _, p := range []string{
		primitive.PropertyKeys, primitive.PropertyTags, primitive.PropertyWaitStoreMsgOk, primitive.PropertyDelayTimeLevel,
		primitive.PropertyRetryTopic, primitive.PropertyTimerDeliverMS, primitive.PropertyRealTopic, primitive.PropertyRealQueueId,
		primitive.PropertyTransactionPrepared, primitive.PropertyProducerGroup, primitive.PropertyMinOffset, primitive.PropertyMaxOffset,
		primitive.PropertyBuyerId, primitive.PropertyOriginMessageId, primitive.PropertyTransferFlag, primitive.PropertyCorrectionFlag,
		primitive.PropertyMQ2Flag, primitive.PropertyReconsumeTime, primitive.PropertyMsgRegion, primitive.PropertyTraceSwitch,
		primitive.PropertyUniqueClientMessageIdKeyIndex, primitive.PropertyMaxReconsumeTimes, primitive.PropertyConsumeStartTime,
		primitive.PropertyTranscationPreparedQueueOffset, primitive.PropertyTranscationCheckTimes, primitive.PropertyCheckImmunityTimeInSeconds,
		primitive.PropertyShardingKey, primitive.PropertyTransactionID, primitive.PropertyCorrelationID, primitive.PropertyMessageReplyToClient,
		primitive.PropertyMessageTTL, primitive.PropertyReplyMessageArriveTime, primitive.PropertyMsgType, primitive.PropertyCluster,
		// the Java broker's, not named by the Go client
		"TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY",
		"INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET", "INNER_NUM", "INNER_BASE", "PROPERTY_CRC32",
	} {
		m[strings.ToUpper(p)] = true
	}
	return m
}()

// reservedProperty returns why RocketMQ reserves the header name, or "".
func reservedProperty(name string) string {
	switch up := strings.ToUpper(name); {
	case up == "CONTENT-TYPE":
		return "a second content type next to the CloudEvents attributes switches a reader to structured mode; set content_type instead"
	case strings.HasPrefix(up, "CE_") || strings.HasPrefix(up, "CE-"):
		return "the CloudEvents binding carries the event's attributes under CE_; use another name"
	case systemProperties[up]:
		return "it is a RocketMQ system property, which the broker or client acts on; use another name"
	}
	return ""
}

// checkHeaders returns why e's user headers cannot be sent as RocketMQ
// properties unchanged, or nil.
func checkHeaders(h map[string]string) error {
	for k, v := range h {
		if err := broker.CheckHeader(transport, k, v); err != nil {
			return err
		}
		if why := reservedProperty(k); why != "" {
			return fmt.Errorf("header %q: %w: RocketMQ reserves it: %s (%w)", k, outbox.ErrReservedHeader, why, outbox.ErrInvalidMessage)
		}
		if v == "" {
			// rocketmq-client-go drops a property with an empty value,
			// and the Java client refuses one
			return fmt.Errorf("header %q: %w: RocketMQ properties cannot carry an empty value; leave the header out or give it a value (%w)", k, outbox.ErrInvalidHeader, outbox.ErrInvalidMessage)
		}
	}
	return nil
}

// attrProperty returns the property name of a CloudEvents attribute.
func attrProperty(name string) string { return PropertyPrefix + name }

// message builds e's RocketMQ message in the binding's binary mode: body =
// payload, keys = [event id], sharding key = event key, CE_ properties
// and the user headers. It checks e first.
func (b *Broker) message(e *outbox.Event) (*primitive.Message, error) {
	if err := broker.CheckCloudEvent(e); err != nil {
		return nil, fmt.Errorf("rocketmqbroker: event %s: %w", e.EventID, err)
	}
	if err := checkHeaders(e.Headers); err != nil {
		return nil, fmt.Errorf("rocketmqbroker: event %s: %w", e.EventID, err)
	}
	if why := topicProblem(e.Topic); why != "" {
		return nil, fmt.Errorf("rocketmqbroker: event %s: topic %q: %w: %s", e.EventID, e.Topic, ErrInvalidTopic, why)
	}
	props := make(map[string]string, 9+len(e.Headers))
	for _, a := range broker.AppendCloudEventAttributes(make([]broker.Attribute, 0, 9), e, b.cfg.Source) {
		if a.Name == broker.AttrPartitionKey {
			continue // the sharding key carries it
		}
		props[attrProperty(a.Name)] = a.Value
	}
	for k, v := range e.Headers {
		props[k] = v
	}
	m := primitive.NewMessage(e.Topic, e.Payload)
	m.WithProperties(props)
	m.WithKeys([]string{e.EventID})
	if e.Key != "" {
		m.WithShardingKey(e.Key)
	}
	if size := messageSize(m); size > b.cfg.MaxMessage {
		return nil, fmt.Errorf("rocketmqbroker: event %s: its %d-byte body with its properties makes %d bytes, above the limit of %d (Config.MaxMessage / max_message) (%w); store large data elsewhere and send a reference",
			e.EventID, len(e.Payload), size, b.cfg.MaxMessage, outbox.ErrPayloadTooLarge)
	}
	if n := len(m.MarshallProperties()); n > maxProperties {
		return nil, fmt.Errorf("rocketmqbroker: event %s: its properties take %d bytes; RocketMQ allows at most %d: send fewer or shorter headers (%w)", e.EventID, n, maxProperties, outbox.ErrInvalidMessage)
	}
	return m, nil
}

// maxProperties is the largest property block RocketMQ stores (its length
// is a signed 16-bit field).
const maxProperties = 32767

// messageSize is the body plus the serialized properties.
func messageSize(m *primitive.Message) int {
	return len(m.Body) + len(m.MarshallProperties())
}

// topicProblem returns why s is not a legal RocketMQ topic name, or "".
func topicProblem(s string) string {
	switch {
	case s == "":
		return "it is empty"
	case len(s) > 127:
		return fmt.Sprintf("it is %d characters long; RocketMQ allows at most 127", len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '%' || c == '|') {
			return fmt.Sprintf("byte %d (%q) is not allowed; RocketMQ topic names hold only ASCII letters, digits, '%%', '|', '_' and '-'", i, c)
		}
	}
	return ""
}

// longestTime formats as the longest CE_time value.
var longestTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)

// Check reports, before m is enqueued, whether the Broker can deliver it
// (topic name, headers, size with its properties). It
// implements broker.Checker. Errors are *outbox.ValidationError.
func (b *Broker) Check(m outbox.Message) error {
	e := outbox.Event{Message: m, CreatedAt: longestTime}
	if e.EventID == "" {
		e.EventID = "00000000-0000-0000-0000-000000000000"
	}
	if why := topicProblem(m.Topic); why != "" {
		return &outbox.ValidationError{Field: "Topic", Err: ErrInvalidTopic, Fix: why}
	}
	if err := checkHeaders(m.Headers); err != nil {
		return &outbox.ValidationError{Field: "Headers", Err: err, Fix: "rename or remove the header"}
	}
	if _, err := b.message(&e); err != nil {
		field := "Message"
		if errors.Is(err, outbox.ErrPayloadTooLarge) {
			field = "Payload"
		}
		return &outbox.ValidationError{Field: field, Err: err, Fix: "keep the payload and headers within the limit the error names"}
	}
	return nil
}
