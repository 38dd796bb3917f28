//go:build unix

package kafkabroker_test

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/kafkabroker"
	"github.com/outbox-go/outbox/testkit/drainbench"
)

// BenchmarkPublish compares, in one run, the adapter's Publish with the
// floor under it: raw franz-go Produce of the same topic, keys and
// payloads with only a ce_id header, on a client with the same settings
// (idempotent, acks=all), every promise awaited. Each iteration sends one
// batch of 1,000 through each of the three paths in turn (the order
// rotating), so machine noise hits all of them alike:
//
//	raw       kgo.Client.Produce + ce_id header, await every promise
//	adapter   Broker.Publish: topic, key, type, 200-byte JSON, no user headers
//	headers   the same with 3 user headers
//
// Kafka is kfake, in this process on real 127.0.0.1 ports (3 brokers, a
// topic of 6 partitions), so the server's CPU is in the same process as
// the client's; the ratio is what the adapter keeps of what franz-go can
// do against it.
//
//	go test -run XXX -bench Publish -benchtime 100x ./broker/kafkabroker/
func BenchmarkPublish(b *testing.B) {
	const batch = 1000
	_, seeds := startKafka(b)
	admin := client(b, seeds)
	topic := uniqueName("bench")
	createTopic(b, admin, topic, 6)
	br := dial(b, seeds, kafkabroker.Config{})
	raw := client(b, seeds, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchMaxBytes(kafkabroker.DefaultMaxMessage))

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
	rawPublish := func(recs []*kgo.Record) {
		var wg sync.WaitGroup
		wg.Add(len(recs))
		var mu sync.Mutex
		var first error
		for _, r := range recs {
			raw.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
				}
				wg.Done()
			})
		}
		wg.Wait()
		if first != nil {
			b.Fatalf("raw produce: %v", first)
		}
	}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}

	var rawT, plainT, headedT time.Duration
	var rawCPU, plainCPU, headedCPU time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		rawBatch := events(i, nil)
		recs := make([]*kgo.Record, batch)
		for j, e := range rawBatch {
			recs[j] = &kgo.Record{Topic: e.Topic, Key: []byte(e.Key), Value: e.Payload, Headers: []kgo.RecordHeader{{Key: "ce_id", Value: []byte(e.EventID)}}}
		}
		plainBatch, headedBatch := events(i, nil), events(i, userHeaders)
		b.StartTimer()
		for k := range 3 {
			start, startCPU := time.Now(), cpu()
			switch (i + k) % 3 {
			case 0:
				rawPublish(recs)
				rawT += time.Since(start)
				rawCPU += cpu() - startCPU
			case 1:
				publish(b, br, plainBatch)
				plainT += time.Since(start)
				plainCPU += cpu() - startCPU
			case 2:
				publish(b, br, headedBatch)
				headedT += time.Since(start)
				headedCPU += cpu() - startCPU
			}
		}
	}
	b.StopTimer()
	n := float64(b.N * batch)
	rate := func(d time.Duration) float64 { return n / d.Seconds() }
	b.ReportMetric(rate(rawT), "raw-msgs/s")
	b.ReportMetric(rate(plainT), "adapter-msgs/s")
	b.ReportMetric(rate(headedT), "headers-msgs/s")
	b.ReportMetric(rate(plainT)/rate(rawT), "adapter/raw")
	b.ReportMetric(rate(headedT)/rate(rawT), "headers/raw")
	b.ReportMetric(float64(rawCPU.Nanoseconds())/n, "raw-cpu-ns/msg")
	b.ReportMetric(float64(plainCPU.Nanoseconds())/n, "adapter-cpu-ns/msg")
	b.ReportMetric(float64(headedCPU.Nanoseconds())/n, "headers-cpu-ns/msg")
	b.ReportMetric(0, "ns/op")
}

func publish(b *testing.B, br *kafkabroker.Broker, events []outbox.Event) {
	for j, err := range br.Publish(context.Background(), events) {
		if err != nil {
			b.Fatalf("publish of event %d: %v", j, err)
		}
	}
}

// BenchmarkRelayDrain drains a backlog of events from PostgreSQL through
// relay.Run and the adapter into Kafka (kfake in this process: 3 brokers,
// a topic of 6 partitions) and reports it against raw franz-go produces of
// the same records (same keys and payloads, only a ce_id header, a client
// with the same settings, every promise of a batch awaited) to a topic of
// its own, in the same run; see package internal/drainbench for what is
// measured. kfake runs in this process, so its CPU is in the self figures.
//
//	go test -run XXX -bench RelayDrain -benchtime 1x -timeout 30m ./broker/kafkabroker/
func BenchmarkRelayDrain(b *testing.B) {
	_, seeds := startKafka(b)
	admin := client(b, seeds)
	topic := uniqueName("drain")
	createTopic(b, admin, topic, 6)
	createTopic(b, admin, topic+"_raw", 6)
	raw := client(b, seeds, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchMaxBytes(kafkabroker.DefaultMaxMessage))
	drainbench.Run(b, drainbench.Harness{Topic: topic, Broker: dial(b, seeds, kafkabroker.Config{}), Raw: func(batch []outbox.Message) error {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var first error
		wg.Add(len(batch))
		for _, m := range batch {
			r := &kgo.Record{Topic: topic + "_raw", Key: []byte(m.Key), Value: m.Payload,
				Headers: []kgo.RecordHeader{{Key: "ce_id", Value: []byte(outbox.NewEventID())}}}
			raw.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
				}
				wg.Done()
			})
		}
		wg.Wait()
		return first
	}})
}
