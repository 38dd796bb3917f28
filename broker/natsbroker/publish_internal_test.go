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
