package httpbroker

import (
	"fmt"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

var _ broker.Checker = (*Broker)(nil)

// Check reports, before m is enqueued, whether the Broker can send it: its
// headers must be ones HTTP can carry unchanged and does not reserve
// (webhook-*, ce-*, Content-Type, the framing headers), its topic must not
// be empty when the URL has {topic}, and with Config.MaxMessage set the
// payload and headers must fit it. It implements broker.Checker. Errors are
// *outbox.ValidationError.
func (b *Broker) Check(m outbox.Message) error {
	if m.Topic == "" && b.target.has {
		return &outbox.ValidationError{Field: "Topic", Err: outbox.ErrInvalidMessage, Fix: "the webhook URL has {topic}: set the topic"}
	}
	if err := broker.CheckHeaders(broker.HTTP, m.Headers); err != nil {
		return &outbox.ValidationError{Field: "Headers", Err: err, Fix: "rename or remove the header"}
	}
	if b.cfg.MaxMessage <= 0 {
		return nil
	}
	e := outbox.Event{Message: m}
	if e.EventID == "" {
		e.EventID = "00000000-0000-0000-0000-000000000000"
	}
	size := len(m.Payload) + len(HeaderPrefix+"time") + len("9999-12-31T23:59:59.999999999Z")
	for _, a := range broker.CloudEventAttributes(e, b.cfg.Source) {
		size += len(HeaderPrefix) + len(a.Name) + broker.PercentEncodedLen(a.Value)
	}
	for k, v := range m.Headers {
		size += len(k) + len(v)
	}
	if size > b.cfg.MaxMessage {
		return &outbox.ValidationError{Field: "Payload", Err: outbox.ErrPayloadTooLarge, Fix: fmt.Sprintf(
			"with its headers the request takes %d bytes, above the webhook adapter's limit of %d (Config.MaxMessage); store large data elsewhere and send a reference", size, b.cfg.MaxMessage)}
	}
	return nil
}
