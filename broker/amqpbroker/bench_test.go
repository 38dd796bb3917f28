package amqpbroker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/amqpbroker"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/testkit/drainbench"
)

// BenchmarkPublish compares, in one run, the adapter's Publish with the
// floor under it: raw amqp091-go publishes of the same routing key and
// payloads on a channel in confirm mode, mandatory and persistent with
// only a message-id, every confirm awaited. Each iteration sends one batch
// of 1,000 through each of the three paths in turn (the order rotating),
// so machine noise hits all of them alike:
//
//	raw       PublishWithDeferredConfirm ×1000, then wait for each confirm
//	adapter   Broker.Publish: topic, key, type, 200-byte JSON, no headers
//	headers   the same with 3 user headers
//
// The queue is durable and capped at 10,000 messages (drop-head), so the
// run measures publishing, not a growing queue. Run it against the shared
// server (OUTBOX_TEST_AMQP, default amqp://guest:guest@127.0.0.1:5672/):
//
//	go test -run XXX -bench Publish -benchtime 50x ./broker/amqpbroker/
func BenchmarkPublish(b *testing.B) {
	const batch = 1000
	url := testenv.Require(b, testenv.RabbitMQ)
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	admin, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	queue := fmt.Sprintf("amqpbench_%d", time.Now().UnixNano()%1_000_000_000)
	if _, err := admin.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-max-length": int32(10000), "x-overflow": "drop-head"}); err != nil {
		b.Fatal(err)
	}
	defer admin.QueueDelete(queue, false, false, false) //nolint:errcheck

	raw, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := raw.Confirm(false); err != nil {
		b.Fatal(err)
	}
	br, err := amqpbroker.Dial(url, amqpbroker.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close(context.Background()) //nolint:errcheck

	payload := []byte(`{"order_id":42,"customer":"c-7","status":"PAID","pad":"` + strings.Repeat("x", 140) + `"}`)
	userHeaders := map[string]string{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tenant":      "acme",
		"causation":   "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a",
	}
	events := func(i int, headers map[string]string) []outbox.Event {
		ev := make([]outbox.Event, batch)
		for j := range ev {
			m := outbox.Message{Topic: queue, Key: fmt.Sprintf("order-%d", (i*batch+j)%5000), Type: "OrderPaid", Payload: payload, Headers: headers}
			ev[j] = outbox.Event{ID: int64(i*batch + j + 1), Message: m.Normalized(), CreatedAt: time.Now()}
		}
		return ev
	}
	dcs := make([]*amqp.DeferredConfirmation, batch)
	rawPublish := func(ev []outbox.Event) {
		for j := range ev {
			dcs[j], err = raw.PublishWithDeferredConfirm("", queue, true, false, amqp.Publishing{
				DeliveryMode: amqp.Persistent, MessageId: ev[j].EventID, Body: ev[j].Payload,
			})
			if err != nil {
				b.Fatalf("raw publish: %v", err)
			}
		}
		for _, dc := range dcs {
			if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
				b.Fatalf("raw publish not acked: %v", err)
			}
		}
	}
	publish := func(ev []outbox.Event) {
		for j, err := range br.Publish(context.Background(), ev) {
			if err != nil {
				b.Fatalf("publish of event %d: %v", j, err)
			}
		}
	}

	var rawT, plainT, headedT time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		rawBatch, plainBatch, headedBatch := events(i, nil), events(i, nil), events(i, userHeaders)
		b.StartTimer()
		for k := range 3 {
			start := time.Now()
			switch (i + k) % 3 {
			case 0:
				rawPublish(rawBatch)
				rawT += time.Since(start)
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
	b.ReportMetric(rate(plainT), "adapter-msgs/s")
	b.ReportMetric(rate(headedT), "headers-msgs/s")
	b.ReportMetric(rate(plainT)/rate(rawT), "adapter/raw")
	b.ReportMetric(rate(headedT)/rate(rawT), "headers/raw")
	b.ReportMetric(0, "ns/op") // the op is three batches; the rates above say more
}

// BenchmarkRelayDrain drains a backlog of events from PostgreSQL through
// relay.Run and the adapter into a RabbitMQ queue and reports it against
// raw amqp091-go publishes of the same messages (confirm mode, mandatory,
// persistent, every confirmation awaited) in the same run; see package
// internal/drainbench for what is measured:
//
//	go test -run XXX -bench RelayDrain -benchtime 1x -timeout 30m ./broker/amqpbroker/
func BenchmarkRelayDrain(b *testing.B) {
	url := testenv.Require(b, testenv.RabbitMQ)
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	admin, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	queue := fmt.Sprintf("amqpdrain_%d", time.Now().UnixNano()%1_000_000_000)
	if _, err := admin.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-max-length": int32(20000), "x-overflow": "drop-head"}); err != nil {
		b.Fatal(err)
	}
	defer admin.QueueDelete(queue, false, false, false) //nolint:errcheck
	raw, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := raw.Confirm(false); err != nil {
		b.Fatal(err)
	}
	br, err := amqpbroker.Dial(url, amqpbroker.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close(context.Background()) //nolint:errcheck
	confirm := func(dcs []*amqp.DeferredConfirmation) error {
		for _, dc := range dcs {
			if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
				return fmt.Errorf("raw publish not acked: %v", err)
			}
		}
		return nil
	}
	// same: the properties and cloudEvents: headers the adapter sends
	same := func(batch []outbox.Message) error {
		dcs := make([]*amqp.DeferredConfirmation, 0, len(batch))
		now := time.Now()
		stamp := now.UTC().Format(time.RFC3339Nano)
		for _, m := range batch {
			id := outbox.NewEventID()
			dc, err := raw.PublishWithDeferredConfirm("", queue, true, false, amqp.Publishing{
				DeliveryMode: amqp.Persistent, MessageId: id, Type: m.Type, ContentType: "application/json", Timestamp: now, Body: m.Payload,
				Headers: amqp.Table{"cloudEvents:id": id, "cloudEvents:source": "outbox", "cloudEvents:specversion": "1.0", "cloudEvents:type": m.Type,
					"cloudEvents:time": stamp, "cloudEvents:partitionkey": m.Key, "cloudEvents:schemaversion": "1"}})
			if err != nil {
				return err
			}
			dcs = append(dcs, dc)
		}
		return confirm(dcs)
	}
	drainbench.Run(b, drainbench.Harness{Topic: queue, Broker: br, Server: "beam.smp", Same: same, Raw: func(batch []outbox.Message) error {
		dcs := make([]*amqp.DeferredConfirmation, 0, len(batch))
		for _, m := range batch {
			dc, err := raw.PublishWithDeferredConfirm("", queue, true, false, amqp.Publishing{DeliveryMode: amqp.Persistent, MessageId: outbox.NewEventID(), Body: m.Payload})
			if err != nil {
				return err
			}
			dcs = append(dcs, dc)
		}
		return confirm(dcs)
	}})
}
