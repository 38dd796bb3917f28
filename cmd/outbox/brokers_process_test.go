package main_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// checkFirstDeliveries asserts that payloads (in arrival order) hold every
// message, each key's first deliveries in sequence order, and returns how
// many arrivals were repeats.
func checkFirstDeliveries(t *testing.T, payloads []string, msgs []outbox.Message) int {
	t.Helper()
	seen := map[string]bool{}
	next := map[string]int{}
	dups := 0
	for _, p := range payloads {
		if seen[p] {
			dups++
			continue
		}
		seen[p] = true
		key, n, _ := strings.Cut(p, "#")
		var seq int
		fmt.Sscan(n, &seq)
		if seq != next[key]+1 {
			t.Errorf("key %s: event #%d delivered first after #%d: order broken", key, seq, next[key])
		}
		next[key] = seq
	}
	lost := 0
	for _, m := range msgs {
		if !seen[string(m.Payload)] {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d events never arrived", lost, len(msgs))
	}
	return dups
}

// PostgreSQL → Redis: the relay is SIGKILLed mid-stream and restarted;
// every committed event is in the stream, read back with go-redis, in
// per-key order, and none twice: the adapter's dedup recognises what the
// killed relay had added but not acknowledged. (A kill lands between a
// batch's XADDs and its acknowledgement only now and then; the adapter's
// own TestRepublishedEventIsDuplicate proves the recognition itself.)
func TestRedisRelayKilledMidStream(t *testing.T) {
	redisURL := testenv.Require(t, testenv.Redis)
	o := teststores.Open(t, "postgres", store.Options{})
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	stream := "proc_" + strings.ReplaceAll(outbox.NewEventID(), "-", "")
	ctx := context.Background()
	t.Cleanup(func() {
		keys, _ := rdb.Keys(ctx, "outbox:dedup:{"+stream+"}:*").Result()
		for len(keys) > 0 {
			n := min(len(keys), 500)
			rdb.Del(ctx, keys[:n]...)
			keys = keys[n:]
		}
		rdb.Del(ctx, stream)
	})
	msgs := keyedWorkload(t, o.Store, stream, 3000, 40)
	args := relayArgs(o, redisURL)
	r := startRelay(t, args...)
	deadline := time.Now().Add(60 * time.Second)
	for n, _ := rdb.XLen(ctx, stream).Result(); n < 1000; n, _ = rdb.XLen(ctx, stream).Result() {
		if time.Now().After(deadline) {
			t.Fatalf("stream stuck at %d entries; relay stderr:\n%s", n, r.stderr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.kill()
	r = startRelay(t, args...)
	waitPending0(t, o.Store, 90*time.Second)
	r.stop(t)

	entries, err := rdb.XRange(ctx, stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	payloads := make([]string, len(entries))
	for i, e := range entries {
		payloads[i], _ = e.Values["data"].(string)
		if e.Values["ce_type"] != "Bumped" || e.Values["ce_id"] == "" || !strings.HasPrefix(payloads[i], fmt.Sprint(e.Values["key"])+"#") {
			t.Fatalf("entry %s = %v", e.ID, e.Values)
		}
	}
	dups := checkFirstDeliveries(t, payloads, msgs)
	if dups != 0 {
		t.Errorf("%d events were added twice; dedup should have recognised them", dups)
	}
	t.Logf("stream holds %d entries for %d events", len(entries), len(msgs))
}

// PostgreSQL → a webhook receiver: the relay is SIGKILLed mid-stream and
// restarted; every event arrives signed (checked from the Standard
// Webhooks spec, independently of the adapter), in per-key order.
func TestWebhookRelayKilledMidStream(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw2KcLzFWcSGQ="
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	var mu sync.Mutex
	var payloads []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, key)
		fmt.Fprintf(mac, "%s.%s.", r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"))
		mac.Write(body)
		if r.Header.Get("webhook-signature") != "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)) || r.URL.Path != "/hooks/orders" {
			t.Errorf("bad request %s %v", r.URL.Path, r.Header)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Lock()
		payloads = append(payloads, string(body))
		mu.Unlock()
	}))
	defer srv.Close()
	o := teststores.Open(t, "postgres", store.Options{})
	msgs := keyedWorkload(t, o.Store, "orders", 2000, 40)
	args := relayArgs(o, srv.URL+"/hooks/{topic}?webhook_secret="+url.QueryEscape(secret))
	r := startRelay(t, args...)
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(payloads) }
	deadline := time.Now().Add(60 * time.Second)
	for count() < 600 {
		if time.Now().After(deadline) {
			t.Fatalf("stuck at %d requests; relay stderr:\n%s", count(), r.stderr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.kill()
	r = startRelay(t, args...)
	waitPending0(t, o.Store, 90*time.Second)
	r.stop(t)
	mu.Lock()
	defer mu.Unlock()
	dups := checkFirstDeliveries(t, payloads, msgs)
	t.Logf("%d requests for %d events (%d repeats after the kill)", len(payloads), len(msgs), dups)
}
