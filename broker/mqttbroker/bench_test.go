package mqttbroker_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/mqttbroker"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/testkit/drainbench"
)

// BenchmarkPublish compares, in one run, the adapter's Publish with the
// floor under it: raw paho.golang QoS 1 publishes of the same topic and
// payloads, no properties, one goroutine per message in paho's blocking
// Publish (paho's session keeps them to the server's Receive Maximum),
// every PUBACK awaited. Each iteration sends one batch of 1,000 through
// each of the four paths in turn (the order rotating):
//
//	raw       1,000 goroutines × paho Client.Publish, QoS 1, on a plain TCP connection
//	rawqa     the same on the Broker's connection wrapper (buffered reads,
//	          TCP_QUICKACK), which Mosquitto's Nagle stall otherwise costs
//	          raw ≈ 40ms per batch
//	adapter   Broker.Publish: topic, key, type, 200-byte JSON, no headers
//	headers   the same with 3 user headers
//
// adapter/rawqa is the ratio that compares like with like.
//
// Nobody subscribes (PUBACK 0x10), so the run measures publishing. Run it
// against the shared server (OUTBOX_TEST_MQTT, default
// mqtt://127.0.0.1:1883):
//
//	go test -run XXX -bench Publish -benchtime 50x ./broker/mqttbroker/
func BenchmarkPublish(b *testing.B) {
	const batch = 1000
	url := testenv.Require(b, testenv.MQTT)
	addr := strings.TrimPrefix(url, "mqtt://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	raw := paho.NewClient(paho.ClientConfig{ClientID: uniqueName("outbox-bench-raw"), Conn: conn})
	if _, err := raw.Connect(context.Background(), &paho.Connect{ClientID: uniqueName("outbox-bench-raw"), KeepAlive: 30, CleanStart: true}); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = raw.Disconnect(&paho.Disconnect{}); <-raw.Done() }()
	conn2, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	rawQA := paho.NewClient(paho.ClientConfig{ClientID: uniqueName("outbox-bench-rawqa"), Conn: mqttbroker.NewQuickAckConn(conn2, conn2, time.Minute)})
	if _, err := rawQA.Connect(context.Background(), &paho.Connect{ClientID: uniqueName("outbox-bench-rawqa"), KeepAlive: 30, CleanStart: true}); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = rawQA.Disconnect(&paho.Disconnect{}); <-rawQA.Done() }()
	br, err := mqttbroker.Dial(url, mqttbroker.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close(context.Background()) //nolint:errcheck

	topic := uniqueName("outbox/bench")
	payload := []byte(`{"order_id":42,"customer":"c-7","status":"PAID","pad":"` + strings.Repeat("x", 140) + `"}`)
	userHeaders := map[string]string{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tenant":      "acme",
		"causation":   "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a",
	}
	events := func(i int, headers map[string]string) []outbox.Event {
		ev := make([]outbox.Event, batch)
		for j := range ev {
			m := outbox.Message{Topic: topic, Key: fmt.Sprintf("order-%d", (i*batch+j)%5000), Type: "OrderPaid", Payload: payload, Headers: headers}
			ev[j] = outbox.Event{ID: int64(i*batch + j + 1), Message: m.Normalized(), CreatedAt: time.Now()}
		}
		return ev
	}
	rawPublish := func(raw *paho.Client, ev []outbox.Event) {
		var wg sync.WaitGroup
		errs := make(chan error, len(ev))
		for j := range ev {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := raw.Publish(context.Background(), &paho.Publish{QoS: 1, Topic: ev[j].Topic, Payload: ev[j].Payload}); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatalf("raw publish: %v", err)
		}
	}
	publish := func(ev []outbox.Event) {
		for j, err := range br.Publish(context.Background(), ev) {
			if err != nil {
				b.Fatalf("publish of event %d: %v", j, err)
			}
		}
	}

	var rawT, rawQAT, plainT, headedT time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		rawBatch, plainBatch, headedBatch := events(i, nil), events(i, nil), events(i, userHeaders)
		b.StartTimer()
		for k := range 4 {
			start := time.Now()
			switch (i + k) % 4 {
			case 0:
				rawPublish(raw, rawBatch)
				rawT += time.Since(start)
			case 3:
				rawPublish(rawQA, rawBatch)
				rawQAT += time.Since(start)
			case 1:
				publish(plainBatch)
				plainT += time.Since(start)
			case 2:
				publish(headedBatch)
				headedT += time.Since(start)
			}
		}
	}
	b.StopTimer()
	n := float64(b.N * batch)
	rate := func(d time.Duration) float64 { return n / d.Seconds() }
	b.ReportMetric(rate(rawT), "raw-msgs/s")
	b.ReportMetric(rate(rawQAT), "rawqa-msgs/s")
	b.ReportMetric(rate(plainT), "adapter-msgs/s")
	b.ReportMetric(rate(headedT), "headers-msgs/s")
	b.ReportMetric(rate(plainT)/rate(rawT), "adapter/raw")
	b.ReportMetric(rate(plainT)/rate(rawQAT), "adapter/rawqa")
	b.ReportMetric(rate(headedT)/rate(rawQAT), "headers/rawqa")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRelayDrain drains a backlog of events from PostgreSQL through
// relay.Run and the adapter to Mosquitto (nobody subscribed) and reports
// it against raw paho QoS 1 publishes of the same messages (one goroutine
// per message, on the Broker's connection wrapper, every PUBACK awaited)
// in the same run; see package internal/drainbench for what is measured:
//
//	go test -run XXX -bench RelayDrain -benchtime 1x -timeout 30m ./broker/mqttbroker/
func BenchmarkRelayDrain(b *testing.B) {
	url := testenv.Require(b, testenv.MQTT)
	addr := strings.TrimPrefix(url, "mqtt://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	id := uniqueName("outbox-drain-raw")
	raw := paho.NewClient(paho.ClientConfig{ClientID: id, Conn: mqttbroker.NewQuickAckConn(conn, conn, time.Minute)})
	if _, err := raw.Connect(context.Background(), &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true}); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = raw.Disconnect(&paho.Disconnect{}); <-raw.Done() }()
	br, err := mqttbroker.Dial(url, mqttbroker.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close(context.Background()) //nolint:errcheck
	drainbench.Run(b, drainbench.Harness{Topic: uniqueName("outbox/drain"), Broker: br, Server: "mosquitto", Raw: func(batch []outbox.Message) error {
		var wg sync.WaitGroup
		errs := make(chan error, len(batch))
		for _, m := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := raw.Publish(context.Background(), &paho.Publish{QoS: 1, Topic: m.Topic, Payload: m.Payload}); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		return <-errs
	}})
}
