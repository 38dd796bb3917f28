package mqttbroker

import (
	"context"
	"errors"
	"fmt"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// Publish sends events at QoS 1, in slice order on one connection, and
// waits for each PUBACK. An event's result is nil only once its PUBACK came
// with a reason code below 0x80 (0x10, no matching subscribers, included).
// With Dial's connection the whole batch is in flight at once, up to the
// server's Receive Maximum; with New's client, paho's blocking Publish
// sends one event at a time.
func (b *Broker) Publish(ctx context.Context, events []outbox.Event) []error {
	results := make([]error, len(events))
	if len(events) == 0 {
		return results
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return broker.Fill(len(events), ErrClosed)
	}
	b.inflight.Add(1)
	b.mu.Unlock()
	defer b.inflight.Done()

	l, err := b.current()
	if err != nil {
		return broker.Fill(len(events), err)
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	// A lost connection ends every wait for a PUBACK at once: no session
	// outlives the connection here, so those PUBACKs never come.
	ctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	go func() {
		select {
		case <-l.c.Done():
			lost(ErrConnectionLost)
		case <-ctx.Done():
		}
	}()

	limit := b.maxMessage()
	for i := range events {
		results[i] = b.check(&events[i], limit)
	}
	if l.sess == nil {
		for i := range events {
			if results[i] == nil {
				results[i] = b.publishOne(ctx, l.c, &events[i])
			}
		}
		return results
	}

	acks := make([]chan packets.ControlPacket, len(events))
	l.pubMu.Lock()
	for i := range events {
		if results[i] != nil {
			continue
		}
		e := &events[i]
		if ctx.Err() != nil {
			results[i] = b.ctxError(ctx, e, "not sent")
			continue
		}
		ack := make(chan packets.ControlPacket, 1)
		l.sess.next = ack
		_, err := l.c.PublishWithOptions(ctx, b.message(e), paho.PublishOptions{Method: paho.PublishMethod_AsyncSend})
		l.sess.next = nil
		switch {
		case err == nil:
			acks[i] = ack
		case errors.Is(err, paho.ErrNetworkErrorAfterStored):
			acks[i] = ack // the write failed: the connection is going, and with it the wait
		default:
			results[i] = b.sendError(ctx, l.c, e, err)
		}
	}
	l.pubMu.Unlock()

	for i, ack := range acks {
		if ack == nil {
			continue
		}
		e := &events[i]
		select {
		case p := <-ack:
			results[i] = pubackResult(e, p)
		case <-ctx.Done():
			results[i] = b.ctxError(ctx, e, "no PUBACK")
		}
	}
	return results
}

// pubackResult is nil for a PUBACK with a reason code below 0x80.
func pubackResult(e *outbox.Event, p packets.ControlPacket) error {
	pa, ok := p.Content.(*packets.Puback)
	if !ok {
		// paho hands an empty packet when the session is closed under it.
		return fmt.Errorf("mqttbroker: event %s on %q not confirmed: %w", e.EventID, e.Topic, ErrConnectionLost)
	}
	if pa.ReasonCode < 0x80 {
		return nil
	}
	return refused(e, paho.PublishResponseFromPuback(pa))
}

// publishOne publishes e with paho's blocking Publish (New's client).
func (b *Broker) publishOne(ctx context.Context, c *paho.Client, e *outbox.Event) error {
	if ctx.Err() != nil {
		return b.ctxError(ctx, e, "not sent")
	}
	resp, err := c.Publish(ctx, b.message(e))
	if resp != nil && resp.ReasonCode >= 0x80 {
		return refused(e, resp)
	}
	if err == nil {
		return nil
	}
	return b.sendError(ctx, c, e, err)
}

// sendError classifies an error of paho's Publish.
func (b *Broker) sendError(ctx context.Context, c *paho.Client, e *outbox.Event, err error) error {
	switch {
	case ctx.Err() != nil:
		return b.ctxError(ctx, e, "no PUBACK")
	case errors.Is(err, session.ErrNoConnection):
		return fmt.Errorf("mqttbroker: event %s on %q not sent: %w", e.EventID, e.Topic, ErrConnectionLost)
	case errors.Is(err, paho.ErrInvalidArguments):
		return broker.Permanentf("mqttbroker: event %s on %q: paho refused it: %w", e.EventID, e.Topic, err)
	}
	select {
	case <-c.Done():
		return fmt.Errorf("mqttbroker: event %s on %q not confirmed: %v: %w", e.EventID, e.Topic, err, ErrConnectionLost)
	default:
	}
	return fmt.Errorf("mqttbroker: event %s on %q not confirmed: %w", e.EventID, e.Topic, err)
}

// ctxError is the result of an event whose wait ended with ctx: the
// connection was lost (unavailable), or the caller's deadline passed.
func (b *Broker) ctxError(ctx context.Context, e *outbox.Event, what string) error {
	if cause := context.Cause(ctx); errors.Is(cause, ErrConnectionLost) {
		return fmt.Errorf("mqttbroker: event %s on %q: %s: %w; it reconnects by itself, retry later", e.EventID, e.Topic, what, cause)
	}
	return fmt.Errorf("mqttbroker: event %s on %q: %s before the deadline: %w", e.EventID, e.Topic, what, ctx.Err())
}

// refused classifies a PUBACK reason code of 0x80 or more: a publish the
// server does not authorize, a topic it will not take, a packet too large
// or a payload format it refuses are permanent (an operator fixes the ACL
// or the row, then retries the DEAD event); the rest (unspecified,
// implementation specific, quota exceeded, packet identifier in use) are
// retried.
func refused(e *outbox.Event, resp *paho.PublishResponse) error {
	reason := reasonName(resp.ReasonCode)
	if resp.Properties != nil && resp.Properties.ReasonString != "" {
		reason += ": " + resp.Properties.ReasonString
	}
	err := fmt.Errorf("mqttbroker: event %s on %q: %w: 0x%02x %s", e.EventID, e.Topic, ErrRefused, resp.ReasonCode, reason)
	switch resp.ReasonCode {
	case 0x87, 0x90, 0x95, 0x99:
		return broker.Permanent(err)
	}
	return err
}

func reasonName(code byte) string {
	switch code {
	case 0x80:
		return "unspecified error"
	case 0x83:
		return "implementation specific error"
	case 0x87:
		return "not authorized (check the server's ACL for this client and topic)"
	case 0x90:
		return "topic name invalid"
	case 0x91:
		return "packet identifier in use"
	case 0x95:
		return "packet too large"
	case 0x97:
		return "quota exceeded"
	case 0x99:
		return "payload format invalid"
	}
	return "error"
}
