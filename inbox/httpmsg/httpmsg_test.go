package httpmsg_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/httpbroker"
	"github.com/outbox-go/outbox/inbox"
	"github.com/outbox-go/outbox/inbox/httpmsg"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw2KcLzFWcSGQ="

// What httpbroker POSTs, read by a net/http server with ReadRequest, is
// verified and comes out as the event that was published.
func TestRoundTripThroughHTTP(t *testing.T) {
	t.Parallel()
	got := make(chan inbox.Message, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hooks/{topic}", func(w http.ResponseWriter, r *http.Request) {
		m, err := httpmsg.ReadRequest(r, r.PathValue("topic"), secret)
		if err != nil {
			t.Errorf("ReadRequest: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- m
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	b, err := httpbroker.Dial(srv.URL+"/hooks/{topic}", httpbroker.Config{Secret: secret, Source: "/billing"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())

	created := time.Date(2026, 3, 4, 5, 6, 7, 8000, time.UTC)
	e := outbox.Event{ID: 7, CreatedAt: created, Message: outbox.Message{
		EventID: outbox.NewEventID(), Topic: "orders", Key: "订单 42", Type: "Order Paid",
		AggregateType: "Order", SchemaVersion: 2, ContentType: "application/json",
		Payload: []byte(`{"id":42}`), Headers: map[string]string{"tenant": "acme", "X-Request-Id": "r-1"},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Publish(ctx, []outbox.Event{e})[0]; err != nil {
		t.Fatal(err)
	}
	m := <-got
	if m.EventID != e.EventID || m.Type != e.Type || m.Key != e.Key || m.SchemaVersion != 2 ||
		m.AggregateType != "Order" || m.Source != "/billing" || m.ContentType != "application/json" ||
		m.Topic != "orders" || string(m.Payload) != string(e.Payload) || !m.Time.Equal(created) {
		t.Errorf("ReadRequest = %+v", m)
	}
	if len(m.Headers) != 2 || m.Headers["tenant"] != "acme" || m.Headers["x-request-id"] != "r-1" {
		t.Errorf("Headers = %v, want only tenant and x-request-id", m.Headers)
	}
}

func TestVerifyRefuses(t *testing.T) {
	t.Parallel()
	key, _ := httpbroker.DecodeSecret(secret)
	body := []byte(`{"id":42}`)
	signed := func(ts time.Time, b []byte) http.Header {
		s := strconv.FormatInt(ts.Unix(), 10)
		h := http.Header{}
		h.Set("webhook-id", "msg-1")
		h.Set("webhook-timestamp", s)
		h.Set("webhook-signature", "v1,bm90IHRoaXMgb25l "+httpbroker.Sign(key, "msg-1", s, b))
		return h
	}
	if err := httpmsg.Verify(secret, signed(time.Now(), body), body, 0); err != nil {
		t.Fatalf("a good signature (second of two): %v", err)
	}
	other := "whsec_" + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
	for _, c := range []struct {
		name   string
		secret string
		h      http.Header
		body   []byte
		want   error
	}{
		{"tampered body", secret, signed(time.Now(), body), []byte(`{"id":43}`), httpmsg.ErrBadSignature},
		{"wrong secret", other, signed(time.Now(), body), body, httpmsg.ErrBadSignature},
		{"old timestamp", secret, signed(time.Now().Add(-10*time.Minute), body), body, httpmsg.ErrStale},
		{"future timestamp", secret, signed(time.Now().Add(10*time.Minute), body), body, httpmsg.ErrStale},
		{"unsigned", secret, http.Header{}, body, httpmsg.ErrNoSignature},
	} {
		if err := httpmsg.Verify(c.secret, c.h, c.body, 0); !errors.Is(err, c.want) {
			t.Errorf("%s: %v; want %v", c.name, err, c.want)
		}
	}
	if err := httpmsg.Verify("not-a-secret", signed(time.Now(), body), body, 0); err == nil {
		t.Error("a malformed secret was accepted")
	}
}

func TestFromHeaderFallsBackToWebhookID(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("webhook-id", "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a")
	h.Set("ce-type", "Order%20Paid")
	h.Set("User-Agent", "Go-http-client/1.1")
	h.Set("Content-Length", "2")
	m, err := httpmsg.FromHeader("t", h, []byte("{}"))
	if err != nil || m.EventID != "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a" || m.Type != "Order Paid" || len(m.Headers) != 0 {
		t.Errorf("FromHeader = %+v, %v", m, err)
	}
	h.Set("ce-schemaversion", "x")
	if _, err := httpmsg.FromHeader("t", h, nil); !errors.Is(err, inbox.ErrMalformedHeader) {
		t.Errorf("bad schema version: %v", err)
	}
}
