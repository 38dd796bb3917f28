package natsbroker

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

func TestAckResult(t *testing.T) {
	t.Parallel()
	b := &Broker{}
	e := &outbox.Event{Message: outbox.Message{EventID: "id", Topic: "orders"}}
	for _, tc := range []struct {
		reply     string
		shortcut  bool // plainPubAck accepts it without decoding
		ok        bool
		permanent bool
	}{
		// As nats-server 2.x writes them.
		{`{"stream":"ORDERS", "seq":1}`, true, true, false},
		{`{"stream":"ORDERS", "seq":1,"duplicate": true}`, true, true, false},
		{`{"stream":"ORDERS", "domain":"hub", "seq":7}`, true, true, false},
		{`{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"},"stream":"ORDERS","seq":0}`, false, false, true},
		{`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"ORDERS","seq":0}`, false, false, false},
		// Not the shortcut's shape, still decoded correctly.
		{`{"seq":1,"stream":"ORDERS"}`, false, true, false},
		{`{ "stream" : "ORDERS" , "seq" : 1 }`, false, true, false},
		// The shortcut's prefix but with an error: decoded in full.
		{`{"stream":"ORDERS","seq":0,"error":{"code":500,"err_code":1,"description":"x"}}`, false, false, false},
		// Not a PubAck.
		{`{"stream":"","seq":1}`, false, false, false},
		{`{}`, false, false, false},
		{`not json`, false, false, false},
		{`{"stream":"ORDERS"`, false, false, false},
	} {
		if got := plainPubAck([]byte(tc.reply)); got != tc.shortcut {
			t.Errorf("plainPubAck(%s) = %v, want %v", tc.reply, got, tc.shortcut)
		}
		err := b.ackResult(context.Background(), e, &nats.Msg{Data: []byte(tc.reply)}, map[string]error{})
		if (err == nil) != tc.ok || broker.IsPermanent(err) != tc.permanent {
			t.Errorf("ackResult(%s) = %v; want ok %v, permanent %v", tc.reply, err, tc.ok, tc.permanent)
		}
		var apiErr *jetstream.APIError
		if err != nil && !tc.ok && strings.HasPrefix(tc.reply, `{"error"`) && !errors.As(err, &apiErr) {
			t.Errorf("ackResult(%s) = %v; want it to wrap the *jetstream.APIError", tc.reply, err)
		}
	}
}

func TestReplySubjects(t *testing.T) {
	t.Parallel()
	got := replySubjects("_INBOX.abc.", 12)
	for i, s := range got {
		if want := "_INBOX.abc." + strconv.Itoa(i); s != want {
			t.Errorf("reply %d = %q, want %q", i, s, want)
		}
	}
}

func TestWindow(t *testing.T) {
	t.Parallel()
	w := &window{free: 3}
	if n, _ := w.take(2); n != 2 {
		t.Fatalf("take(2) of 3 = %d", n)
	}
	if n, _ := w.take(5); n != 1 {
		t.Fatalf("take(5) of 1 = %d", n)
	}
	n, freed := w.take(1)
	if n != 0 || freed == nil {
		t.Fatalf("take(1) of 0 = %d, %v; want 0 and a channel", n, freed)
	}
	w.give(2)
	select {
	case <-freed:
	default:
		t.Fatal("give did not close the channel take returned")
	}
	if n, _ := w.take(5); n != 2 {
		t.Fatalf("take(5) after give(2) = %d", n)
	}
}

// orderedCall is a call of an ordered Publish whose events were all sent,
// without a connection: the test plays the replies.
func orderedCall(topics ...string) *call {
	events := make([]outbox.Event, len(topics))
	for i, t := range topics {
		events[i] = outbox.Event{ID: int64(i + 1), Message: outbox.Message{EventID: strconv.Itoa(i + 1), Topic: t}}
	}
	groups := map[string]int{}
	c := &call{b: &Broker{window: &window{}}, events: events, prefix: "_INBOX.t.", ordered: true,
		results: make([]error, len(events)), waiting: make([]bool, len(events)), group: make([]int, len(events)),
		done: make(chan struct{})}
	for i, t := range topics {
		g, ok := groups[t]
		if !ok {
			g = len(groups)
			groups[t] = g
		}
		c.group[i] = g
	}
	c.queue, c.left, c.stored, c.poisoned = make([][]int, len(groups)), make([]int, len(groups)), make([]int, len(groups)), make([]bool, len(groups))
	for i, g := range c.group {
		c.waiting[i] = true
		c.pending++
		c.queue[g] = append(c.queue[g], i)
	}
	c.sent = true
	return c
}

func reply(c *call, g int, data string) {
	c.onAck(g, &nats.Msg{Data: []byte(data)})
}

const storedAck = `{"stream":"S", "seq":1}`

// A group succeeds only when it has as many "stored" PubAcks as messages;
// a reply too many, or any other reply, names no event and sends the
// group's events again on their own; nothing is closed twice.
func TestOrderedGroupsCountPubAcks(t *testing.T) {
	t.Parallel()
	c := orderedCall("a", "b", "a")
	reply(c, 0, storedAck)
	if c.results[0] != nil || !c.waiting[0] || !c.waiting[2] {
		t.Fatal("one PubAck for a group of two must settle neither event")
	}
	reply(c, 1, storedAck)
	reply(c, 0, storedAck)
	select {
	case <-c.done:
	default:
		t.Fatal("every group answered, but the call is not done")
	}
	for i, err := range c.results {
		if err != nil || c.waiting[i] {
			t.Errorf("event %d: %v, waiting %v; want stored", i, err, c.waiting[i])
		}
	}
	reply(c, 0, storedAck) // a reply too many: ignored, and no second close
	for i, err := range c.results {
		if err != nil {
			t.Errorf("after a stray reply, event %d: %v; want it left stored", i, err)
		}
	}

	c = orderedCall("a", "a", "b")
	reply(c, 0, storedAck)
	reply(c, 0, `{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"S","seq":0}`)
	reply(c, 0, storedAck) // after the group gave up: ignored
	reply(c, 1, storedAck)
	if c.results[0] != errUnordered || c.results[1] != errUnordered || c.results[2] != nil {
		t.Fatalf("results %v; want the group with the error sent again on its own, the other stored", c.results)
	}
	select {
	case <-c.done:
	default:
		t.Fatal("no event waits any more, but the call is not done")
	}

	c = orderedCall("a", "a")
	c.onAck(0, &nats.Msg{Header: nats.Header{"Status": []string{"503"}}}) // no responders
	if c.results[0] != errUnordered || c.results[1] != errUnordered {
		t.Fatalf("after no responders: %v; want both sent again on their own", c.results)
	}
}
