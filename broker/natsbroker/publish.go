package natsbroker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

// connCheck is how often the connection is checked while Publish calls
// wait for PubAcks, to see that it was not lost meanwhile (the acks of a
// lost connection never come); see watch.
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
	if !b.gate.Enter() {
		return broker.Fill(len(events), ErrClosed)
	}
	defer b.gate.Leave()

	if err := ctx.Err(); err != nil {
		return broker.Fill(len(events), fmt.Errorf("natsbroker: not published: %w", err))
	}
	if st := b.nc.Status(); st != nats.CONNECTED {
		return broker.Fill(len(events), fmt.Errorf("%w (connection %s); it reconnects by itself, retry later", ErrNotConnected, strings.ToLower(st.String())))
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()

	b.publish(ctx, events, results, true)
	// Events whose topic had a reply the ordered pass cannot attribute
	// (an error, a "no responders") go again, each with a reply subject of
	// its own; those JetStream stored meanwhile come back as duplicates.
	var again []int
	for i, err := range results {
		if err == errUnordered {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		sub := make([]outbox.Event, len(again))
		for j, i := range again {
			sub[j] = events[i]
		}
		subResults := make([]error, len(sub))
		b.publish(ctx, sub, subResults, false)
		for j, i := range again {
			results[i] = subResults[j]
		}
	}
	return results
}

// publish runs one call: ordered (one reply subject per topic, whose
// "stored" PubAcks are counted) or not (one reply subject per event).
func (b *Broker) publish(ctx context.Context, events []outbox.Event, results []error, ordered bool) {
	c, err := b.newCall(events, results, ordered)
	if err != nil {
		if err == ErrClosed {
			fillFrom(results, 0, err)
		} else {
			fillFrom(results, 0, fmt.Errorf("natsbroker: not published: subscribing to the PubAcks failed: %w", err))
		}
		return
	}
	if err := c.send(ctx); err != nil {
		c.stop(err)
	} else {
		c.await(ctx)
	}
	c.end()
	// The "no responders" replies are resolved here, not as they come:
	// the stream lookup is a request to JetStream, and it would hold up
	// the PubAcks of the other calls this one takes them for.
	var lookups map[string]error // topic → verdict
	for i, err := range results {
		if err == errNoResponders {
			if lookups == nil {
				lookups = make(map[string]error)
			}
			results[i] = b.ackError(ctx, &events[i], jetstream.ErrNoStreamResponse, lookups)
		}
	}
}

// errNoResponders is the result onAck records for a "no responders" reply
// of an unordered call; publish replaces it with the verdict of a stream
// lookup once the call ended. It never reaches the caller.
var errNoResponders = errors.New("natsbroker: no responders (the stream lookup is pending)")

// errUnordered marks an event of an ordered call whose topic got a reply
// that names no event; Publish sends it again with a reply of its own. It
// never reaches the caller.
var errUnordered = errors.New("natsbroker: a reply on the event's topic named no event; publishing it again on its own")

// call is one Publish in flight. Its PubAcks come to reply subjects
// <inbox>.<call>.0, <inbox>.<call>.1, … on the Broker's one reply
// subscription (replies); the waiting calls take them and record each
// result: no timer, goroutine or channel per message, and no subscription
// per call.
//
// An ordered call gives each topic one reply subject (a group) and only
// counts its replies: no reply is matched to an event. JetStream answers
// each message it stores with one PubAck, so when a group has as many
// "stored" PubAcks as it sent messages, every message of the group was
// stored, and all its events succeed together. Any other reply on the group
// (an error, a "no responders") names no event, so the group gives up: its
// events become errUnordered, later replies on it are ignored, and Publish
// sends them again, each with a reply subject of its own (an unordered
// call, where every reply names its event and errors are told apart).
// Sending again is safe: JetStream deduplicates on Nats-Msg-Id, so the
// events it had stored come back as duplicates. A group that did not get
// all its replies in time fails like any event waiting for its PubAck.
// Nothing here depends on the order replies come in, or on every message
// getting a reply. One reply subject per topic instead of per message saves
// nats-server routing a new subject for each PubAck: about 1 µs of its CPU
// per message, and 7 % of the relay's drain rate on 2 cores
// (BENCHMARKS.md, "Broker adapters against their raw clients").
type call struct {
	b       *Broker
	events  []outbox.Event
	id      uint64   // the call's number among the Broker's replies
	prefix  string   // reply subjects are prefix + group index
	replies []string // prefix+"0", prefix+"1", …

	// Groups: the events that share a reply subject. Unordered, group i is
	// event i; ordered, a group is a topic.
	ordered  bool
	group    []int   // event index → group
	queue    [][]int // group → its events sent (ordered calls)
	left     []int   // group → its events send has not handled yet
	stored   []int   // group → "stored" PubAcks counted (ordered calls)
	poisoned []bool  // group → a reply that is not a "stored" PubAck came

	lost  <-chan struct{} // closed when the connection is lost (watch)
	inbox inbox           // where the replies come (replies)

	// mu guards what follows, and the results of the events sent: onAck
	// writes those. An event that is not sent has its result set by send.
	mu      sync.Mutex
	results []error
	waiting []bool        // sent, result not recorded yet
	pending int           // how many are waiting
	sent    bool          // send has finished
	stopped bool          // await gave up; later acks are ignored
	done    chan struct{} // closed once sent and nothing is waiting (doneLocked)
	closed  bool          // done is closed
}

func (b *Broker) newCall(events []outbox.Event, results []error, ordered bool) (*call, error) {
	c := &call{
		b: b, events: events, results: results,
		waiting: make([]bool, len(events)),
		done:    make(chan struct{}),
		ordered: ordered,
		group:   make([]int, len(events)),
	}
	groups := len(events)
	if ordered {
		topics := make(map[string]int)
		for i := range events {
			g, ok := topics[events[i].Topic]
			if !ok {
				g = len(topics)
				topics[events[i].Topic] = g
			}
			c.group[i] = g
		}
		groups = len(topics)
	} else {
		for i := range c.group {
			c.group[i] = i
		}
	}
	c.queue = make([][]int, groups)
	c.left = make([]int, groups)
	c.stored = make([]int, groups)
	c.poisoned = make([]bool, groups)
	for _, g := range c.group {
		c.left[g]++
	}
	c.lost = b.watch.join() // before registering: no reply can come yet
	id, prefix, in, err := b.replies.register(c)
	if err != nil {
		b.watch.leave()
		return nil, err
	}
	c.id, c.prefix, c.inbox = id, prefix, in
	c.replies = replySubjects(c.prefix, groups)
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

// end unregisters the call (replies that come later are dropped) and
// returns the window slots of events still waiting.
func (c *call) end() {
	c.b.replies.unregister(c.id)
	c.b.watch.leave()
	c.mu.Lock()
	n := c.pending // unordered: each waiting event holds a slot
	if c.ordered {
		// ordered: each message sent and not answered holds one; those
		// answered gave theirs back in onAck
		n = 0
		for g, q := range c.queue {
			n += max(len(q)-c.stored[g], 0)
		}
	}
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
		c.doneLocked()
		c.mu.Unlock()
	}()
	for i := range c.events {
		e := &c.events[i]
		msg, err := bt.message(c.events, i)
		if err != nil {
			c.results[i] = err // not sent, so onAck does not touch it
			c.handled(c.group[i])
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
		g := c.group[i]
		msg.Reply = c.replies[g]
		c.mu.Lock()
		if c.poisoned[g] {
			// the group gave up: the unordered call sends the event
			c.results[i] = errUnordered
			c.mu.Unlock()
			c.handled(g)
			continue
		}
		c.waiting[i] = true
		c.pending++
		if c.ordered {
			c.queue[g] = append(c.queue[g], i)
		}
		c.mu.Unlock()
		if err := c.b.nc.PublishMsg(msg); err != nil {
			c.mu.Lock()
			if c.waiting[i] { // no reply can come; be exact anyway
				c.waiting[i] = false
				c.pending--
			}
			if q := c.queue[g]; len(q) > 0 && q[len(q)-1] == i {
				c.queue[g] = q[:len(q)-1] // not sent after all (unless the group gave up meanwhile)
			}
			c.mu.Unlock()
			if perr := c.b.sendError(e, err); perr != nil {
				c.results[i] = perr
				c.handled(g)
				continue
			}
			// The connection is the problem, not this event: the rest of
			// the batch would fail the same way. The events sent before
			// are still awaited (their groups may complete).
			if c.inbox.dropped() {
				err = fmt.Errorf("%w: %w", ErrClosed, err) // Close closed the connection Dial opened
			}
			fillFrom(c.results, i, fmt.Errorf("natsbroker: event %s not sent: %w", e.EventID, err))
			for j := i; j < len(c.events); j++ {
				c.handled(c.group[j])
			}
			return nil
		}
		credit--
		c.handled(g)
	}
	return nil
}

// doneLocked closes done once every event is sent and none is waiting.
// c.mu is held.
func (c *call) doneLocked() {
	if c.sent && c.pending == 0 && !c.closed {
		c.closed = true
		close(c.done)
	}
}

// handled notes that send is done with one event of group g (sent it or
// set its result), and completes the group if its replies are all in.
func (c *call) handled(g int) {
	if !c.ordered {
		return
	}
	c.mu.Lock()
	c.left[g]--
	c.completeLocked(g)
	c.mu.Unlock()
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

// wait returns nil when ready is closed, or why the call must give up:
// ctx's error, errConnLost once the connection is seen lost, or ErrClosed
// once Close dropped the reply subscription (no reply can come after it).
// Meanwhile it hands the replies that come to their calls (this one or
// others).
func (c *call) wait(ctx context.Context, ready <-chan struct{}) error {
	for {
		select {
		case <-ready:
			return nil
		case m := <-c.inbox.ch:
			c.inbox.dispatch(m)
		case <-c.inbox.gone:
			return c.closing(ready)
		case <-c.lost:
			if c.inbox.dropped() {
				// Close dropped the subscription, then closed the
				// connection Dial opened: it will not reconnect.
				return c.closing(ready)
			}
			return errConnLost
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// closing is wait's answer once Close dropped the reply subscription:
// the replies that came before still count, then the call gives up.
func (c *call) closing(ready <-chan struct{}) error {
	c.inbox.drain()
	select {
	case <-ready:
		return nil
	default:
		return ErrClosed
	}
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
		switch why {
		case errConnLost:
			c.results[i] = fmt.Errorf("natsbroker: event %s on %q not confirmed: the connection was lost before its PubAck (%w); it reconnects by itself, retry later", e.EventID, e.Topic, why)
		case ErrClosed:
			c.results[i] = fmt.Errorf("natsbroker: event %s on %q not confirmed: the broker was closed before its PubAck came (%w); JetStream may have stored it, so it is to be published again", e.EventID, e.Topic, why)
		default:
			c.results[i] = fmt.Errorf("natsbroker: no PubAck for event %s on %q before the deadline: %w", e.EventID, e.Topic, why)
		}
	}
}

// onAck records the reply m to the call's group g. It runs on the
// goroutine of whichever call took m from the shared subscription, so it
// must not block (a "no responders" is looked into by publish, after the
// call).
func (c *call) onAck(g int, m *nats.Msg) {
	if g < 0 || g >= len(c.queue) {
		return // not ours
	}
	if !c.ordered {
		if noRespondersReply(m) {
			c.record(g, errNoResponders)
		} else {
			c.record(g, c.b.ackResult(context.Background(), &c.events[g], m, nil))
		}
		return
	}
	if !stored(m) {
		c.poison(g)
		return
	}
	c.mu.Lock()
	if c.stopped || c.poisoned[g] {
		c.mu.Unlock()
		return // too late, or the group gave up
	}
	c.stored[g]++
	if c.stored[g] > len(c.queue[g]) {
		c.mu.Unlock()
		c.poison(g) // more replies than messages: trust none
		return
	}
	c.completeLocked(g)
	c.mu.Unlock()
	c.b.window.give(1) // one message of the group is answered
}

// completeLocked records success for every event of group g once send is
// done with the group and each message it sent has its "stored" PubAck.
// c.mu is held.
func (c *call) completeLocked(g int) {
	if c.stopped || c.poisoned[g] || c.left[g] > 0 || c.stored[g] < len(c.queue[g]) {
		return
	}
	c.endGroupLocked(g, nil)
}

// endGroupLocked gives every event of group g still waiting the result res
// and forgets the group's messages. c.mu is held.
func (c *call) endGroupLocked(g int, res error) {
	for _, i := range c.queue[g] {
		if c.waiting[i] {
			c.waiting[i] = false
			c.results[i] = res
			c.pending--
		}
	}
	c.queue[g], c.stored[g] = nil, 0
	c.doneLocked()
}

// record sets event i's result, unless it has one already or the call gave
// up waiting.
func (c *call) record(i int, res error) {
	c.mu.Lock()
	if c.stopped || !c.waiting[i] {
		c.mu.Unlock()
		return // too late, or a second reply
	}
	c.waiting[i] = false
	c.results[i] = res
	c.pending--
	c.doneLocked()
	c.mu.Unlock()
	c.b.window.give(1)
}

// poison gives up on group g: its events still waiting become
// errUnordered, and so do those not sent yet (see send).
func (c *call) poison(g int) {
	c.mu.Lock()
	if c.stopped || c.poisoned[g] {
		c.mu.Unlock()
		return
	}
	c.poisoned[g] = true
	unanswered := max(len(c.queue[g])-c.stored[g], 0) // their window slots are still taken
	c.endGroupLocked(g, errUnordered)
	c.mu.Unlock()
	c.b.window.give(unanswered)
}

// stored reports whether m is a PubAck saying JetStream stored the message
// (or had stored it before: a duplicate).
func stored(m *nats.Msg) bool {
	if len(m.Data) == 0 {
		return false // a status message, such as "no responders"
	}
	if plainPubAck(m.Data) {
		return true
	}
	var ack pubAck
	return json.Unmarshal(m.Data, &ack) == nil && ack.Error == nil && ack.Stream != ""
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

// noRespondersReply reports whether m is a "no responders" status: no
// stream listens on the subject.
func noRespondersReply(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get(statusHeader) == noResponders
}

// ackResult is nil when m is a PubAck for e, else the error it reports.
// Only a "no responders" looks the stream up (with ctx, caching the verdict
// in lookups).
func (b *Broker) ackResult(ctx context.Context, e *outbox.Event, m *nats.Msg, lookups map[string]error) error {
	if noRespondersReply(m) {
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
