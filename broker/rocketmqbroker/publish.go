package rocketmqbroker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	rmqerrors "github.com/apache/rocketmq-client-go/v2/errors"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// Publish sends events and waits for the broker's answer to each; see
// PublishResults.
func (b *Broker) Publish(ctx context.Context, events []outbox.Event) []error {
	res := b.PublishResults(ctx, events)
	errs := make([]error, len(res))
	for i := range res {
		errs[i] = res[i].Err
	}
	return errs
}

// PublishResults sends each key's events one after another with
// SendSync (the hash queue selector puts them on one queue, in order),
// different keys and keyless events in parallel up to Config.MaxInFlight.
// A confirmed result carries the queue id as Partition and the queue
// offset as Offset. Once a key's event fails, its later events in the call
// are not sent (broker.ErrNotAttempted).
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

	// lanes: each key's events in slice order; each keyless event alone
	var lanes [][]int
	byKey := map[string]int{}
	for i := range events {
		k := events[i].Key
		if k == "" {
			lanes = append(lanes, []int{i})
			continue
		}
		if li, ok := byKey[k]; ok {
			lanes[li] = append(lanes[li], i)
			continue
		}
		byKey[k] = len(lanes)
		lanes = append(lanes, []int{i})
	}
	sem := make(chan struct{}, b.cfg.MaxInFlight)
	var wg sync.WaitGroup
	for _, lane := range lanes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			failed := false
			for _, i := range lane {
				e := &events[i]
				if failed {
					out[i].Err = fmt.Errorf("rocketmqbroker: event %s not sent: an earlier event of its key in this batch failed (%w)", e.EventID, broker.ErrNotAttempted)
					continue
				}
				out[i] = b.send(ctx, e)
				failed = out[i].Err != nil
			}
		}()
	}
	wg.Wait()
	return out
}

// send sends one event and classifies the outcome.
func (b *Broker) send(ctx context.Context, e *outbox.Event) broker.Result {
	r := broker.Result{Offset: -1}
	if err := ctx.Err(); err != nil {
		r.Err = fmt.Errorf("rocketmqbroker: event %s not sent: %w", e.EventID, err)
		return r
	}
	m, err := b.message(e)
	if err != nil {
		r.Err = broker.Permanent(err)
		return r
	}
	res, err := b.s.SendSync(ctx, m)
	r.Err = classify(ctx, e, res, err)
	if r.Err == nil && res != nil {
		if res.MessageQueue != nil {
			r.Partition = int32(res.MessageQueue.QueueId)
			r.Stream = res.MessageQueue.BrokerName
		}
		r.Offset = res.QueueOffset
	}
	return r
}

// Response codes of the RocketMQ broker (its Java ResponseCode) that the
// adapter tells apart.
const (
	codeSystemError         = 1
	codeSystemBusy          = 2
	codeMessageIllegal      = 13
	codeServiceNotAvailable = 14
	codeNoPermission        = 16
	codeTopicNotExist       = 17
)

// classify turns SendSync's answer into the event's result error.
func classify(ctx context.Context, e *outbox.Event, res *primitive.SendResult, err error) error {
	if err == nil {
		if res == nil {
			return fmt.Errorf("rocketmqbroker: event %s on %q: the producer returned no result", e.EventID, e.Topic)
		}
		if res.Status != primitive.SendOK {
			// stored on the master but not flushed or replicated as the
			// broker is configured to: not confirmed; a retry may
			// duplicate it, which consumers drop by CE_id
			return fmt.Errorf("rocketmqbroker: event %s on %q: the broker answered %s, not SEND_OK; retried", e.EventID, e.Topic, statusName(res.Status))
		}
		return nil
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("rocketmqbroker: event %s on %q not confirmed in time: %w", e.EventID, e.Topic, err)
	case ctx.Err() != nil:
		return fmt.Errorf("rocketmqbroker: event %s on %q not confirmed in time (%v): %w", e.EventID, e.Topic, err, ctx.Err())
	case errors.Is(err, rmqerrors.ErrNotRunning), errors.Is(err, rmqerrors.ErrService):
		return fmt.Errorf("rocketmqbroker: event %s: the producer is not running: %w (%w)", e.EventID, err, broker.ErrUnavailable)
	case errors.Is(err, rmqerrors.ErrTopicNotExist):
		return broker.Permanent(noTopicError{e.Topic, err})
	}
	if code, ok := responseCode(err); ok {
		switch code {
		case codeTopicNotExist:
			return broker.Permanent(noTopicError{e.Topic, err})
		case codeMessageIllegal:
			return broker.Permanentf("rocketmqbroker: event %s: the broker refused the message as illegal (too large for its maxMessageSize, or bad properties): %w", e.EventID, err)
		case codeNoPermission:
			return fmt.Errorf("rocketmqbroker: event %s: no permission to write topic %q; grant it (retried): %w", e.EventID, e.Topic, err)
		case codeSystemBusy, codeSystemError, codeServiceNotAvailable:
			return fmt.Errorf("rocketmqbroker: event %s on %q: the broker is busy or unavailable (retried): %w", e.EventID, e.Topic, err)
		}
	}
	if strings.Contains(err.Error(), "route info not found") {
		return fmt.Errorf("rocketmqbroker: event %s: no route to topic %q (the name server knows no broker for it: create the topic with mqadmin updateTopic if it does not exist); retried: %w", e.EventID, e.Topic, err)
	}
	return fmt.Errorf("rocketmqbroker: event %s on %q not confirmed: %w", e.EventID, e.Topic, err)
}

// responseCode reads the broker's response code from an error of
// rocketmq-client-go, which carries it only in its text ("CODE: 17, DESC:
// …" or "CODE: 17  DESC: …").
func responseCode(err error) (int, bool) {
	var be primitive.MQBrokerErr
	if errors.As(err, &be) {
		return int(be.ResponseCode), true
	}
	var bep *primitive.MQBrokerErr
	if errors.As(err, &bep) && bep != nil {
		return int(bep.ResponseCode), true
	}
	s := err.Error()
	i := strings.Index(s, "CODE: ")
	if i < 0 {
		return 0, false
	}
	s = s[i+len("CODE: "):]
	j := 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	n, convErr := strconv.Atoi(s[:j])
	return n, convErr == nil
}

func statusName(s primitive.SendStatus) string {
	switch s {
	case primitive.SendFlushDiskTimeout:
		return "FLUSH_DISK_TIMEOUT"
	case primitive.SendFlushSlaveTimeout:
		return "FLUSH_SLAVE_TIMEOUT"
	case primitive.SendSlaveNotAvailable:
		return "SLAVE_NOT_AVAILABLE"
	}
	return fmt.Sprintf("status %d", s)
}

type noTopicError struct {
	topic string
	err   error
}

func (e noTopicError) Error() string {
	return fmt.Sprintf("rocketmqbroker: RocketMQ topic %q does not exist; create it (mqadmin updateTopic -t %s -c CLUSTER) or fix the topic", e.topic, e.topic)
}

func (e noTopicError) Unwrap() []error { return []error{ErrTopicNotFound, e.err} }
