package storetest

import (
	"fmt"
	"strings"
	"testing"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/driver"
)

// sized is a message of key whose payload is JSON of exactly n bytes
// (n at least 20), labelled label.
func sized(label, key string, n int) outbox.Message {
	head := `{"label":"` + label + `","pad":"`
	return outbox.Message{Topic: "orders", Key: key, Type: label, Payload: []byte(head + strings.Repeat("x", max(n-len(head)-2, 0)) + `"}`)}
}

// payloadBytes sums the events' payload lengths.
func payloadBytes(evs []outbox.Event) int64 {
	var n int64
	for _, e := range evs {
		n += int64(len(e.Payload))
	}
	return n
}

// testOwnedMaxBytes: a claim with MaxBytes returns the prefix of what it
// would take that fits the bound, at least one event even when the first
// alone is larger, and claims cut so keep every key's order.
func (s *suite) testOwnedMaxBytes(t *testing.T) {
	fx, o := s.ownedFixture(t)
	own := sole(t, o, "a", true)
	keys := []string{"k0", "k1", "k2", ""}
	var msgs []outbox.Message
	var want []string
	for i := range 24 {
		label := fmt.Sprintf("e%02d", i)
		msgs = append(msgs, sized(label, keys[i%len(keys)], 100+i%3*50))
		want = append(want, label)
	}
	for _, m := range msgs {
		enqueue(t, fx, m) // one by one: ids in this order
	}
	claimBytes := func(maxBytes int64) driver.Claim {
		t.Helper()
		r := s.ownedReq("a", claimable(own), 1000, true)
		r.MaxBytes = maxBytes
		return claimOwned(t, o, r)
	}

	// 100 + 150 + 200 = 450 fits 500; the fourth (100) would not
	c := claimBytes(500)
	wantLabels(t, "claim with MaxBytes 500", c.Events, want[:3]...)
	if n := payloadBytes(c.Events); n > 500 {
		t.Fatalf("claim with MaxBytes 500 took %d payload bytes", n)
	}
	ack(t, fx, c)

	// every event is larger than 10 bytes: one still goes, alone
	c = claimBytes(10)
	wantLabels(t, "claim with MaxBytes 10 (every event is larger)", c.Events, want[3])
	ack(t, fx, c)

	// Claims cut by bytes and not settled yet (the owner's own in-flight
	// events do not hold its keys): together they take every event once,
	// each key's in order, and each claim is a prefix of what is left.
	var got []outbox.Event
	for range 100 {
		c = claimBytes(320)
		if len(c.Events) == 0 {
			break
		}
		if len(c.Events) > 1 && payloadBytes(c.Events) > 320 {
			t.Fatalf("claim with MaxBytes 320 took %d events of %d payload bytes", len(c.Events), payloadBytes(c.Events))
		}
		got = append(got, c.Events...)
	}
	wantLabels(t, "claims with MaxBytes 320, in claim order", got, want[4:]...)
	last := map[string]int64{}
	for _, e := range got {
		if e.Key != "" && e.ID <= last[e.Key] {
			t.Fatalf("key %q: event %d claimed after event %d", e.Key, e.ID, last[e.Key])
		}
		last[e.Key] = e.ID
	}
}
