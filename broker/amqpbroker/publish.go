package amqpbroker

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// Publish sends events, in order, on the session's channel (mandatory,
// persistent) and waits for RabbitMQ's confirm of each. An event's result
// is nil only once RabbitMQ acked it without returning it first.
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

	s, err := b.current()
	if err != nil {
		return broker.Fill(len(events), err)
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()

	c := &call{events: events, results: results, waiting: make([]bool, len(events)), left: 1, done: make(chan struct{})}
	ok := make([]bool, len(events))
	for i := range events {
		if err := b.check(&events[i]); err != nil {
			results[i] = err
			continue
		}
		ok[i] = true
	}
	s.send(ctx, b, c, ok)

	select {
	case <-c.done:
	case <-ctx.Done():
		c.abandon(s, func(e *outbox.Event) error {
			return fmt.Errorf("amqpbroker: no confirm from RabbitMQ for event %s on %q before the deadline: %w", e.EventID, e.Topic, ctx.Err())
		})
	}
	return results
}

// send publishes the events marked ok, in order, each registered under its
// delivery tag before it goes out.
func (s *session) send(ctx context.Context, b *Broker, c *call, ok []bool) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	defer func() {
		s.mu.Lock()
		c.left--
		if c.left == 0 {
			close(c.done)
		}
		s.mu.Unlock()
	}()
	msg := amqp.Publishing{Headers: make(amqp.Table, 16)}
	attrs := make([]broker.Attribute, 0, 9)
	for i := range c.events {
		if !ok[i] {
			continue
		}
		e := &c.events[i]
		if err := ctx.Err(); err != nil {
			c.results[i] = fmt.Errorf("amqpbroker: event %s not sent: %w", e.EventID, err)
			continue
		}
		if why := s.block.get(); why != "" {
			c.results[i] = fmt.Errorf("amqpbroker: event %s not sent: RabbitMQ blocks publishers (%s: memory or disk alarm) (%w)", e.EventID, why, broker.ErrUnavailable)
			continue
		}
		select {
		case s.window <- struct{}{}:
		case <-ctx.Done():
			c.results[i] = fmt.Errorf("amqpbroker: event %s not sent: waiting for room among the MaxPending publishes awaiting a confirm: %w", e.EventID, ctx.Err())
			continue
		case <-s.done:
			c.results[i] = fmt.Errorf("amqpbroker: event %s not sent: %w", e.EventID, s.endErr())
			continue
		}
		tag := s.nextTag
		s.mu.Lock()
		if s.err != nil {
			s.mu.Unlock()
			<-s.window
			c.results[i] = fmt.Errorf("amqpbroker: event %s not sent: %w", e.EventID, s.err)
			continue
		}
		if _, dup := s.inflight[e.EventID]; dup {
			s.mu.Unlock()
			<-s.window
			c.results[i] = fmt.Errorf("amqpbroker: event %s not sent: an earlier publish of the same event id still awaits RabbitMQ's confirm on this channel; retried later", e.EventID)
			continue
		}
		s.pending[tag] = pendingPub{c: c, i: i, id: e.EventID}
		s.inflight[e.EventID] = struct{}{}
		c.waiting[i] = true
		c.left++
		s.mu.Unlock()

		attrs = b.fill(&msg, e, attrs)
		dc, err := s.ch.PublishWithDeferredConfirm(b.cfg.Exchange, e.Topic, true, false, msg)
		if err != nil {
			s.mu.Lock()
			if _, still := s.pending[tag]; still {
				delete(s.pending, tag)
				delete(s.inflight, e.EventID)
				<-s.window
				c.settleLocked(i, fmt.Errorf("amqpbroker: event %s not sent: %v (%w)", e.EventID, err, broker.ErrUnavailable))
			}
			s.mu.Unlock()
			continue
		}
		if dc != nil && dc.DeliveryTag != tag {
			// Someone else published on the session's channel: the tags
			// no longer name our messages. Give the channel up.
			s.end(fmt.Errorf("amqpbroker: delivery tag %d where %d was expected: the Broker's channel is not its own", dc.DeliveryTag, tag))
			_ = s.ch.Close()
			return
		}
		s.nextTag++
	}
}

// abandon stops waiting: every event still awaiting its confirm gets
// why(event); confirms that come later change nothing.
func (c *call) abandon(s *session, why func(*outbox.Event) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, w := range c.waiting {
		if w && c.results[i] == nil {
			c.results[i] = why(&c.events[i])
		}
	}
	c.abandoned = true
}
