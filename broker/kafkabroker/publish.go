package kafkabroker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// Publish sends events and waits for Kafka's acknowledgement of each; see
// PublishResults.
func (b *Broker) Publish(ctx context.Context, events []outbox.Event) []error {
	res := b.PublishResults(ctx, events)
	errs := make([]error, len(res))
	for i := range res {
		errs[i] = res[i].Err
	}
	return errs
}

// PublishResults hands every event of the batch to the idempotent
// producer in slice order, so a key's events are pipelined on its
// partition, then waits until Kafka acknowledged each one (acks=all) or
// ctx ends. A confirmed result carries the record's partition and offset.
//
// An event the adapter refuses before sending (not a valid CloudEvent, a
// reserved header, too large, an illegal topic) fails alone, as permanent;
// the later events of its key in the call are not produced and fail with
// broker.ErrNotAttempted. When Kafka fails a record, franz-go fails every
// record buffered behind it on the same partition: the first failure of a
// partition in the call keeps its error, the later ones are reported as
// broker.ErrNotAttempted, and the later events of a key whose event
// failed are not produced if the failure was known in time.
func (b *Broker) PublishResults(ctx context.Context, events []outbox.Event) []broker.Result {
	out := make([]broker.Result, len(events))
	for i := range out {
		out[i].Offset = -1
	}
	if len(events) == 0 {
		return out
	}
	if !b.gate.Enter() {
		for i := range out {
			out[i].Err = ErrClosed
		}
		return out
	}
	defer b.gate.Leave()
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i].Err = fmt.Errorf("kafkabroker: not sent: %w", err)
		}
		return out
	}

	c := &call{out: out, raw: make([]error, len(events)), failedKeys: map[string]bool{}, done: make(chan struct{})}
	c.pending = 1 // the produce loop itself, so done cannot close before it ends
	attrs := make([]broker.Attribute, 0, 9)
	for i := range events {
		e := &events[i]
		c.mu.Lock()
		held := e.Key != "" && c.failedKeys[e.Key]
		c.mu.Unlock()
		if held {
			out[i].Err = notAttempted(e, "an earlier event of its key in this batch failed")
			continue
		}
		rec, err := b.record(e, &attrs)
		if err != nil {
			out[i].Err = broker.Permanent(err)
			c.failKey(e.Key)
			continue
		}
		c.mu.Lock()
		c.pending++
		c.mu.Unlock()
		b.cl.Produce(ctx, rec, c.promise(i, e.Key))
	}
	c.finish() // the produce loop's own count

	select {
	case <-c.done:
	case <-ctx.Done():
	}
	c.mu.Lock()
	c.returned = true
	c.mu.Unlock()
	b.classify(ctx, events, c)
	return out
}

// call is one PublishResults call's shared state with its promises.
type call struct {
	mu         sync.Mutex
	out        []broker.Result
	raw        []error // franz-go's error per produced event
	acked      []bool
	failedKeys map[string]bool
	pending    int
	returned   bool // PublishResults stopped waiting: promises write nothing more
	done       chan struct{}
}

func (c *call) failKey(key string) {
	if key == "" {
		return
	}
	c.mu.Lock()
	c.failedKeys[key] = true
	c.mu.Unlock()
}

// finish counts the produce loop as done.
func (c *call) finish() {
	c.mu.Lock()
	c.pending--
	if c.pending == 0 {
		close(c.done)
	}
	c.mu.Unlock()
}

func (c *call) promise(i int, key string) func(*kgo.Record, error) {
	return func(r *kgo.Record, err error) {
		c.mu.Lock()
		if !c.returned {
			c.out[i].Partition = r.Partition
			if err == nil {
				c.out[i].Offset = r.Offset
				c.out[i].Err = nil
				if c.acked == nil {
					c.acked = make([]bool, len(c.out))
				}
				c.acked[i] = true
			} else {
				c.raw[i] = err
				if key != "" {
					c.failedKeys[key] = true
				}
			}
		}
		c.pending--
		if c.pending == 0 {
			close(c.done)
		}
		c.mu.Unlock()
	}
}

// notAttempted is the result of an event held back behind another's
// failure.
func notAttempted(e *outbox.Event, why string) error {
	return fmt.Errorf("kafkabroker: event %s not sent: %s (%w)", e.EventID, why, broker.ErrNotAttempted)
}

type topicPartition struct {
	topic     string
	partition int32
}

// classify turns franz-go's outcome of each produced event into its
// result; an event with neither an acknowledgement nor an error was still
// in flight when ctx ended.
func (b *Broker) classify(ctx context.Context, events []outbox.Event, c *call) {
	out := c.out
	firstFail := map[topicPartition]bool{}
	topicErr := map[string]error{} // unknown-topic verdicts, one lookup per topic
	for i := range events {
		e := &events[i]
		if out[i].Err != nil { // refused or held back before producing
			continue
		}
		if c.acked != nil && c.acked[i] {
			continue
		}
		err := c.raw[i]
		if err == nil { // no acknowledgement before ctx ended
			out[i].Err = b.notInTime(e, ctx.Err())
			continue
		}
		if v, ok := b.topicLevel(ctx, e, err, topicErr); ok {
			out[i].Err = v
			continue
		}
		tp := topicPartition{e.Topic, out[i].Partition}
		if firstFail[tp] {
			out[i].Err = notAttempted(e, fmt.Sprintf("Kafka failed an earlier record of partition %d of %q (%v)", tp.partition, e.Topic, err))
			continue
		}
		firstFail[tp] = true
		out[i].Err = b.recordError(ctx, e, err)
	}
}

// topicLevel classifies the errors that concern an event's topic or the
// client as a whole, which every event they hit has in its own right.
func (b *Broker) topicLevel(ctx context.Context, e *outbox.Event, err error, lookups map[string]error) (error, bool) {
	switch {
	case errors.Is(err, kgo.ErrClientClosed):
		return fmt.Errorf("kafkabroker: event %s: the Kafka client closed before it was acknowledged: %w (%w)", e.EventID, err, broker.ErrUnavailable), true
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		v, ok := lookups[e.Topic]
		if !ok {
			v = b.unknownTopic(ctx, e.Topic, err)
			lookups[e.Topic] = v
		}
		return v, true
	case errors.Is(err, kerr.InvalidTopicException):
		return broker.Permanentf("kafkabroker: event %s: Kafka says %q is not a valid topic: %w: %w", e.EventID, e.Topic, ErrInvalidTopic, err), true
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return fmt.Errorf("kafkabroker: event %s: not allowed to write to topic %q; grant the relay's principal WRITE on it (retried): %w", e.EventID, e.Topic, err), true
	}
	return nil, false
}

// unknownTopic decides what "unknown topic" means: permanent only when the
// cluster's metadata, asked again, has no such topic; a topic that exists
// but whose leaders did not answer (a restart, a new topic) is retried.
func (b *Broker) unknownTopic(ctx context.Context, topic string, err error) error {
	lctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		lctx, cancel = context.WithTimeout(context.Background(), b.cfg.Timeout/2)
		defer cancel()
	}
	td, lerr := b.adm.ListTopics(lctx, topic)
	if lerr == nil {
		d, ok := td[topic]
		if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			return broker.Permanent(noTopicError{topic, err})
		}
		if d.Err == nil {
			return fmt.Errorf("kafkabroker: topic %q exists but its partitions did not accept the records yet (a restart or a new topic); retry later: %w", topic, err)
		}
		lerr = d.Err
	}
	return fmt.Errorf("kafkabroker: topic %q was unknown to the broker and looking it up failed (%v); retry later: %w", topic, lerr, err)
}

type noTopicError struct {
	topic string
	err   error
}

func (e noTopicError) Error() string {
	return fmt.Sprintf("kafkabroker: Kafka topic %q does not exist; create it (outbox broker setup --broker kafka://HOST:9092 --topics %s) or fix the topic", e.topic, e.topic)
}

func (e noTopicError) Unwrap() []error { return []error{ErrTopicNotFound, e.err} }

// recordError classifies the error of the first failed record of a
// partition.
func (b *Broker) recordError(ctx context.Context, e *outbox.Event, err error) error {
	switch {
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return b.tooLargeAtBroker(ctx, e, err)
	case errors.Is(err, kerr.InvalidRecord), errors.Is(err, kerr.CorruptMessage), errors.Is(err, kerr.InvalidTimestamp):
		return broker.Permanentf("kafkabroker: event %s: Kafka refused the record on %q: %w", e.EventID, e.Topic, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		if ctx.Err() == nil {
			// another call's context failed the batch it shared with
			// this record: nothing to do with this event
			return notAttempted(e, fmt.Sprintf("it shared a batch with another publish that was cut short (%v)", err))
		}
		return b.notInTime(e, err)
	}
	return fmt.Errorf("kafkabroker: event %s on %q not acknowledged: %w", e.EventID, e.Topic, err)
}

// tooLargeAtBroker explains a MESSAGE_TOO_LARGE from Kafka. The record
// passed the adapter's own limit (Config.MaxMessage), so the topic's
// max.message.bytes is lower: the event is permanent if its record alone
// is above that limit; if only the batch it was in is, it is retried and
// the error says to lower max_message.
func (b *Broker) tooLargeAtBroker(ctx context.Context, e *outbox.Event, err error) error {
	size := recordSize(e, b.cfg.Source)
	limit := b.topicMaxMessage(ctx, e.Topic)
	if limit > 0 && size <= limit {
		return fmt.Errorf("kafkabroker: event %s: Kafka refused the batch it was in as larger than the max.message.bytes=%d of topic %q, although its own record is %d bytes; set the adapter's max_message (Config.MaxMessage, now %d) to %d or less (retried): %w",
			e.EventID, limit, e.Topic, size, b.cfg.MaxMessage, limit, err)
	}
	return broker.Permanentf("kafkabroker: event %s: its record of %d bytes is larger than topic %q accepts (max.message.bytes %s): %w (%w); store large data elsewhere and send a reference, or raise max.message.bytes",
		e.EventID, size, e.Topic, limitText(limit), err, outbox.ErrPayloadTooLarge)
}

func limitText(n int) string {
	if n <= 0 {
		return "unknown"
	}
	return fmt.Sprint(n)
}

// notInTime is the error of an event with no answer before the deadline:
// broker.ErrUnavailable when no broker of the cluster answers at all (an
// outage costs the event no attempt), else a plain timeout.
func (b *Broker) notInTime(e *outbox.Event, err error) error {
	if !b.reachable() {
		return fmt.Errorf("kafkabroker: event %s on %q not acknowledged in time: no Kafka broker answers (%w; %w)", e.EventID, e.Topic, err, broker.ErrUnavailable)
	}
	return fmt.Errorf("kafkabroker: event %s on %q not acknowledged in time: %w", e.EventID, e.Topic, err)
}

// reachable reports whether any broker of the cluster answers a ping
// within 500ms; the answer is kept for a second, so a batch that timed out
// pings once.
func (b *Broker) reachable() bool {
	b.pingMu.Lock()
	defer b.pingMu.Unlock()
	if time.Since(b.pingAt) < time.Second {
		return b.pingOK
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	b.pingOK = b.cl.Ping(ctx) == nil
	b.pingAt = time.Now()
	return b.pingOK
}
