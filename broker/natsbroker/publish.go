package natsbroker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// connCheck is how often a Publish waiting for PubAcks checks that the
// connection was not lost meanwhile (the acks of a lost connection never
// come).
const connCheck = 50 * time.Millisecond

// The status header of a "no responders" reply: nothing (no stream)
// listens on the subject.
const (
	statusHeader = "Status"
	noResponders = "503"
)

// errConnLost is the result of events sent on a connection that was lost
// before their PubAck came.
var errConnLost = fmt.Errorf("%w: %w", ErrNotConnected, nats.ErrDisconnected)

// Publish sends events asynchronously, in order, then waits for each
// PubAck until ctx ends or Config.Timeout passes. A PubAck that reports a
// duplicate (the Nats-Msg-Id was stored before) counts as success.
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

	if err := ctx.Err(); err != nil {
		return broker.Fill(len(events), fmt.Errorf("natsbroker: not published: %w", err))
	}
	if st := b.nc.Status(); st != nats.CONNECTED {
		return broker.Fill(len(events), fmt.Errorf("%w (connection %s); it reconnects by itself, retry later", ErrNotConnected, strings.ToLower(st.String())))
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()

	c, err := b.newCall(ctx, events, results)
	if err != nil {
		return broker.Fill(len(events), fmt.Errorf("natsbroker: not published: subscribing to the PubAcks failed: %w", err))
	}
	defer c.end()
	if err := c.send(ctx); err != nil {
		c.stop(err)
	} else {
		c.await(ctx)
	}
	return results
}

// call is one Publish in flight. Its PubAcks come to reply subjects
// <inbox>.0, <inbox>.1, … (the event's index) on a subscription of its own,
// whose goroutine records each result: no table of pending acks shared by
// all publishes, no timer, goroutine or channel per message.
type call struct {
	b       *Broker
	ctx     context.Context // for the stream lookup of a "no responders"
	events  []outbox.Event
	prefix  string   // reply subjects are prefix + index
	replies []string // prefix+"0", prefix+"1", …
	sub     *nats.Subscription
	lookups map[string]error // subject → verdict on a missing stream; used by onAck only

	reconnects uint64       // the connection's count when the call began
	check      *time.Ticker // when to look at the connection again

	// mu guards what follows, and the results of the events sent: onAck
	// writes those. An event that is not sent has its result set by send.
	mu      sync.Mutex
	results []error
	waiting []bool        // sent, result not recorded yet
	pending int           // how many are waiting
	sent    bool          // send has finished
	stopped bool          // await gave up; later acks are ignored
	done    chan struct{} // closed once sent and nothing is waiting
}

func (b *Broker) newCall(ctx context.Context, events []outbox.Event, results []error) (*call, error) {
	c := &call{
		b: b, ctx: ctx, events: events, results: results,
		prefix:     b.nc.NewInbox() + ".",
		lookups:    make(map[string]error),
		reconnects: b.nc.Stats().Reconnects,
		waiting:    make([]bool, len(events)),
		done:       make(chan struct{}),
	}
	c.replies = replySubjects(c.prefix, len(events))
	sub, err := b.nc.Subscribe(c.prefix+"*", c.onAck)
	if err != nil {
		return nil, err
	}
	c.sub = sub
	c.check = time.NewTicker(connCheck)
	return c, nil
}

// replySubjects returns prefix+"0" … prefix+(n-1), built in one string.
func replySubjects(prefix string, n int) []string {
	var sb strings.Builder
	sb.Grow(n * (len(prefix) + 5))
	ends := make([]int, n)
	var num [20]byte
	for i := range n {
		sb.WriteString(prefix)
		sb.Write(strconv.AppendInt(num[:0], int64(i), 10))
		ends[i] = sb.Len()
	}
	all := sb.String()
	out := make([]string, n)
	start := 0
	for i, end := range ends {
		out[i] = all[start:end]
		start = end
	}
	return out
}

// end drops the subscription (acks that come later are ignored) and
// returns the window slots of events still waiting.
func (c *call) end() {
	_ = c.sub.Unsubscribe()
	c.check.Stop()
	c.mu.Lock()
	n := c.pending
	c.pending = 0
	c.mu.Unlock()
	c.b.window.give(n)
}

// send publishes the events in order, each with its reply subject and a
// window slot. It returns why it gave up waiting for window room, if it
// did: ctx's error or errConnLost.
func (c *call) send(ctx context.Context) error {
	bt := c.b.newBatch()
	credit := 0 // window slots taken and not used yet
	defer func() {
		c.b.window.give(credit)
		c.mu.Lock()
		c.sent = true
		if c.pending == 0 {
			close(c.done)
		}
		c.mu.Unlock()
	}()
	for i := range c.events {
		e := &c.events[i]
		msg, err := bt.message(c.events, i)
		if err != nil {
			c.results[i] = err // not sent, so onAck does not touch it
			continue
		}
		for credit == 0 {
			var freed <-chan struct{}
			if credit, freed = c.b.window.take(len(c.events) - i); credit > 0 {
				break
			}
			if err := c.wait(ctx, freed); err != nil {
				fillFrom(c.results, i, fmt.Errorf("natsbroker: not sent, waiting for room among the MaxPending publishes awaiting a PubAck: %w", err))
				return err
			}
		}
		msg.Reply = c.replies[i]
		c.mu.Lock()
		c.waiting[i] = true
		c.pending++
		c.mu.Unlock()
		if err := c.b.nc.PublishMsg(msg); err != nil {
			c.mu.Lock()
			if c.waiting[i] { // no reply can come; be exact anyway
				c.waiting[i] = false
				c.pending--
			}
			c.mu.Unlock()
			if perr := c.b.sendError(e, err); perr != nil {
				c.results[i] = perr
				continue
			}
			// The connection is the problem, not this event: the rest of
			// the batch would fail the same way. The events sent before
			// are still awaited.
			fillFrom(c.results, i, fmt.Errorf("natsbroker: event %s not sent: %w", e.EventID, err))
			return nil
		}
		credit--
	}
	return nil
}

// await waits until every sent event has its result, ctx ends or the
// connection is lost.
func (c *call) await(ctx context.Context) {
	for {
		if err := c.wait(ctx, c.done); err != nil {
			c.stop(err)
			return
		}
		select {
		case <-c.done:
			return
		default:
		}
	}
}

// wait returns when ready is closed or at the next connection check, nil
// unless the call must give up: then ctx's error or errConnLost.
func (c *call) wait(ctx context.Context, ready <-chan struct{}) error {
	select {
	case <-ready:
	case <-c.check.C:
		if c.b.nc.Status() != nats.CONNECTED || c.b.nc.Stats().Reconnects != c.reconnects {
			return errConnLost
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// stop gives up: the events still waiting for their PubAck fail with why,
// and acks that come later are ignored.
func (c *call) stop(why error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	for i, w := range c.waiting {
		if !w {
			continue
		}
		e := &c.events[i]
		if why == errConnLost {
			c.results[i] = fmt.Errorf("natsbroker: event %s on %q not confirmed: the connection was lost before its PubAck (%w); it reconnects by itself, retry later", e.EventID, e.Topic, why)
		} else {
			c.results[i] = fmt.Errorf("natsbroker: no PubAck for event %s on %q before the deadline: %w", e.EventID, e.Topic, why)
		}
	}
}

// onAck records the reply m to one of the call's events. It runs on the
// subscription's goroutine.
func (c *call) onAck(m *nats.Msg) {
	i, err := strconv.Atoi(strings.TrimPrefix(m.Subject, c.prefix))
	if err != nil || i < 0 || i >= len(c.events) {
		return // not ours
	}
	res := c.b.ackResult(c.ctx, &c.events[i], m, c.lookups)
	c.mu.Lock()
	if c.stopped || !c.waiting[i] {
		c.mu.Unlock()
		return // too late, or a second reply
	}
	c.waiting[i] = false
	c.results[i] = res
	c.pending--
	if c.sent && c.pending == 0 {
		close(c.done)
	}
	c.mu.Unlock()
	c.b.window.give(1)
}

// pubAck is the JetStream reply to a publish: the stream that stored the
// message, or an error. Sequence and the duplicate flag do not matter
// here: a duplicate was stored before, which is success.
type pubAck struct {
	Stream string              `json:"stream"`
	Error  *jetstream.APIError `json:"error"`
}

// plainPubAck reports whether data is certainly a PubAck without error,
// without decoding it: nats-server writes a stored message's PubAck as
// {"stream":"NAME", "seq":N} (with ,"duplicate": true for a duplicate),
// and a refusal as {"error":{…},…}. It is only a shortcut for the common
// case: whatever it does not accept is decoded with encoding/json.
func plainPubAck(data []byte) bool {
	const head = `{"stream":"`
	return len(data) > len(head) && string(data[:len(head)]) == head &&
		data[len(head)] != '"' && // a stream name, not an empty string
		data[len(data)-1] == '}' &&
		!bytes.Contains(data, []byte(`"error"`))
}

// ackResult is nil when m is a PubAck for e, else the error it reports.
func (b *Broker) ackResult(ctx context.Context, e *outbox.Event, m *nats.Msg, lookups map[string]error) error {
	if len(m.Data) == 0 && m.Header.Get(statusHeader) == noResponders {
		return b.ackError(ctx, e, jetstream.ErrNoStreamResponse, lookups)
	}
	if plainPubAck(m.Data) {
		return nil
	}
	var ack pubAck // anything else is decoded in full
	if err := json.Unmarshal(m.Data, &ack); err != nil {
		return b.ackError(ctx, e, fmt.Errorf("%w: %w", jetstream.ErrInvalidJSAck, err), lookups)
	}
	if ack.Error != nil {
		return b.ackError(ctx, e, ack.Error, lookups)
	}
	if ack.Stream == "" {
		return b.ackError(ctx, e, jetstream.ErrInvalidJSAck, lookups)
	}
	return nil
}

func fillFrom(results []error, from int, err error) {
	for j := from; j < len(results); j++ {
		if results[j] == nil {
			results[j] = err
		}
	}
}

// window caps the events awaiting a PubAck on the connection
// (Config.MaxPending), across concurrent Publish calls.
type window struct {
	mu    sync.Mutex
	free  int
	freed chan struct{} // closed when slots are given back; nil if none wait
}

// take takes up to n free slots. When none is free it returns 0 and a
// channel closed at the next give.
func (w *window) take(n int) (int, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if k := min(n, w.free); k > 0 {
		w.free -= k
		return k, nil
	}
	if w.freed == nil {
		w.freed = make(chan struct{})
	}
	return 0, w.freed
}

// give returns n slots.
func (w *window) give(n int) {
	if n == 0 {
		return
	}
	w.mu.Lock()
	w.free += n
	if w.freed != nil {
		close(w.freed)
		w.freed = nil
	}
	w.mu.Unlock()
}
