package httpbroker_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/httpbroker"
)

// BenchmarkPublish compares, in one run, the adapter's Publish with the
// floor under it: raw net/http POSTs of the same bodies by as many
// goroutines as the adapter's MaxInFlight (16), with only Content-Type
// and ce-id set, to a loopback endpoint that reads the body and answers
// 204. Each iteration sends one batch of 1,000 events (distinct keys)
// through each path in turn, the order rotating:
//
//	raw      net/http: 16 goroutines, POST, Content-Type + ce-id
//	plain    Broker.Publish, unsigned: every CloudEvents header, 3 user headers
//	signed   the same with a Standard Webhooks secret (HMAC-SHA256 per request)
//
// The endpoint runs in the same process, so the figures are for loopback
// and both sides share the CPU:
//
//	go test -run XXX -bench Publish -benchtime 50x ./broker/httpbroker/
func BenchmarkPublish(b *testing.B) {
	const batch, conc = 1000, 16
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	target := srv.URL + "/hooks/{topic}"
	plain, err := httpbroker.Dial(target, httpbroker.Config{MaxInFlight: conc})
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Close(context.Background())
	signed, err := httpbroker.Dial(target, httpbroker.Config{MaxInFlight: conc, Secret: secret})
	if err != nil {
		b.Fatal(err)
	}
	defer signed.Close(context.Background())
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()

	payload := []byte(`{"order_id":42,"customer":"c-7","status":"PAID","pad":"` + strings.Repeat("x", 140) + `"}`)
	headers := map[string]string{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tenant":      "acme",
		"causation":   "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a",
	}
	events := func(i int) []outbox.Event {
		ev := make([]outbox.Event, batch)
		for j := range ev {
			m := outbox.Message{Topic: "orders", Key: fmt.Sprintf("order-%d", i*batch+j), Type: "OrderPaid", Payload: payload, Headers: headers}
			ev[j] = outbox.Event{ID: int64(i*batch + j + 1), Message: m.Normalized(), CreatedAt: time.Now()}
		}
		return ev
	}
	raw := func(ev []outbox.Event) {
		work := make(chan *outbox.Event)
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				for e := range work {
					req, _ := http.NewRequest(http.MethodPost, srv.URL+"/hooks/"+e.Topic, bytes.NewReader(e.Payload))
					req.Header.Set("Content-Type", e.ContentType)
					req.Header["ce-id"] = []string{e.EventID}
					resp, err := client.Do(req)
					if err != nil {
						b.Errorf("raw POST: %v", err)
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		for j := range ev {
			work <- &ev[j]
		}
		close(work)
		wg.Wait()
	}
	publish := func(br *httpbroker.Broker, ev []outbox.Event) {
		for j, err := range br.Publish(context.Background(), ev) {
			if err != nil {
				b.Fatalf("publish of event %d: %v", j, err)
			}
		}
	}
	var wall [3]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		batches := [3][]outbox.Event{events(3 * i), events(3*i + 1), events(3*i + 2)}
		b.StartTimer()
		for k := range 3 {
			path := (i + k) % 3
			start := time.Now()
			switch path {
			case 0:
				raw(batches[0])
			case 1:
				publish(plain, batches[1])
			case 2:
				publish(signed, batches[2])
			}
			wall[path] += time.Since(start)
		}
	}
	b.StopTimer()
	n := float64(b.N * batch)
	rate := func(d time.Duration) float64 { return n / d.Seconds() }
	b.ReportMetric(rate(wall[0]), "raw-msgs/s")
	b.ReportMetric(rate(wall[1]), "plain-msgs/s")
	b.ReportMetric(rate(wall[2]), "signed-msgs/s")
	b.ReportMetric(rate(wall[1])/rate(wall[0]), "plain/raw")
	b.ReportMetric(rate(wall[2])/rate(wall[0]), "signed/raw")
	b.ReportMetric(0, "ns/op")
}
