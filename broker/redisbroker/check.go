package redisbroker

import (
	"fmt"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

var _ broker.Checker = (*Broker)(nil)

// longestTime formats as the longest ce_time value, so Check can size an
// event before its creation time is known.
var longestTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)

// Check reports, before m is enqueued, whether the Broker can add it: its
// topic must not be empty, its headers must not be reserved, and the entry
// (payload and every field) must fit Config.MaxMessage. It implements
// broker.Checker: pass it as store.Options.Check. Errors are
// *outbox.ValidationError.
func (b *Broker) Check(m outbox.Message) error {
	if m.Topic == "" {
		return &outbox.ValidationError{Field: "Topic", Err: ErrInvalidTopic, Fix: "set the topic to the stream's name"}
	}
	if err := broker.CheckHeaders(broker.Redis, m.Headers); err != nil {
		return &outbox.ValidationError{Field: "Headers", Err: err, Fix: "rename or remove the header"}
	}
	e := outbox.Event{Message: m, CreatedAt: longestTime}
	if e.EventID == "" {
		e.EventID = "00000000-0000-0000-0000-000000000000"
	}
	size := len(FieldData) + len(m.Payload)
	for _, a := range broker.CloudEventAttributes(e, b.cfg.Source) {
		size += len(fieldOf[a.Name].(string)) + len(a.Value)
	}
	for k, v := range m.Headers {
		size += len(HeaderPrefix) + len(k) + len(v)
	}
	if size > b.cfg.MaxMessage {
		return &outbox.ValidationError{Field: "Payload", Err: outbox.ErrPayloadTooLarge, Fix: fmt.Sprintf(
			"with its fields the entry takes %d bytes, above the Redis adapter's limit of %d (Config.MaxMessage); store large data elsewhere and send a reference", size, b.cfg.MaxMessage)}
	}
	return nil
}
