package e2echeck

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/store"
)

// Source is the CloudEvents source the tests configure their adapter with.
const Source = "/orders"

// Workload enqueues n events on topic over keys (every 11th keyless), with
// aggregate type Order, schema version 2 and the headers tenant=acme and
// seq=<index>, and returns them in commit order.
func Workload(t testing.TB, st store.Store, topic string, n, keys int) []outbox.Message {
	t.Helper()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		key := fmt.Sprintf("order-%d", i%keys)
		if i%11 == 0 {
			key = ""
		}
		msgs[i] = outbox.Message{
			Topic: topic, Key: key, Type: "OrderBumped", AggregateType: "Order", SchemaVersion: 2,
			Payload: fmt.Appendf(nil, `{"i":%d}`, i), Headers: map[string]string{"tenant": "acme", "seq": strconv.Itoa(i)},
		}
	}
	for i := 0; i < n; i += 500 {
		if err := st.Enqueue(context.Background(), msgs[i:min(i+500, n)]...); err != nil {
			t.Fatal(err)
		}
	}
	return msgs
}

// Readback checks what a consumer reads of a Workload.
type Readback struct {
	t       testing.TB
	msgs    []outbox.Message
	seen    map[string]bool
	lastSeq map[string]int // key → index of its last first delivery
	Dups    int            // deliveries of an event already seen
}

// NewReadback checks deliveries of msgs.
func NewReadback(t testing.TB, msgs []outbox.Message) *Readback {
	return &Readback{t: t, msgs: msgs, seen: map[string]bool{}, lastSeq: map[string]int{}}
}

// Add checks one delivery: an event seen before counts as a duplicate;
// otherwise it must be one of the workload's, intact (key, type, payload,
// headers, CloudEvents attributes, topic), and not earlier in its key than
// one delivered before. A failed check ends the test.
func (r *Readback) Add(m inbox.Message) {
	r.t.Helper()
	if r.seen[m.EventID] {
		r.Dups++
		return
	}
	r.seen[m.EventID] = true
	i, err := strconv.Atoi(m.Headers["seq"])
	if err != nil || i < 0 || i >= len(r.msgs) {
		r.t.Fatalf("delivery with seq header %q", m.Headers["seq"])
	}
	want := r.msgs[i]
	if m.Key != want.Key || m.Type != want.Type || m.AggregateType != "Order" || m.SchemaVersion != 2 || m.Source != Source ||
		string(m.Payload) != string(want.Payload) || m.Headers["tenant"] != "acme" || m.ContentType != outbox.DefaultContentType || m.Topic != want.Topic {
		r.t.Fatalf("event %d arrived as %+v", i, m)
	}
	if want.Key != "" {
		if prev, ok := r.lastSeq[want.Key]; ok && prev > i {
			r.t.Fatalf("key %s: event %d first delivered after event %d", want.Key, i, prev)
		}
		r.lastSeq[want.Key] = i
	}
}

// Seen is the number of distinct events delivered.
func (r *Readback) Seen() int { return len(r.seen) }

// Drained waits (until ctx ends) for st to hold nothing pending, the last
// acks being on their way, and fails the test unless it then holds nothing
// pending and nothing DEAD.
func Drained(ctx context.Context, t testing.TB, st store.Store) {
	t.Helper()
	stats, err := st.Stats(ctx)
	for err == nil && stats.Pending() > 0 && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		stats, err = st.Stats(ctx)
	}
	if err != nil || stats.Pending() != 0 || stats.Dead != 0 {
		t.Errorf("store after the drain: %+v, %v", stats, err)
	}
}
