package kafkabroker_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/kafkabroker"
	"github.com/outbox-go/outbox/inbox/kafkamsg"
)

// The record a consumer reads: key = event key, the CloudEvents Kafka
// binding's headers with UTF-8 values, the user's headers unchanged, and
// kafkamsg turning it back into the event.
func TestHeaderMapping(t *testing.T) {
	t.Parallel()
	_, seeds := startKafka(t)
	admin := client(t, seeds)
	topic := uniqueName("headers")
	createTopic(t, admin, topic, 3)
	b := dial(t, seeds, kafkabroker.Config{Source: "/billing service"})

	e := event(topic, 0)
	e.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.FixedZone("CET", 3600))
	e.Key = "order 42 ü"
	e.Type = "OrderPaid"
	e.AggregateType = "Order"
	e.SchemaVersion = 3
	e.ContentType = "application/json; charset=utf-8"
	e.Headers = map[string]string{
		"traceparent": "00-abc-def-01", "Tenant": "acme ✓", "X-Request-Id": "req-1",
		// Reserved by other transports only: Kafka delivers them.
		"Nats-Msg-Id": "kept", "ce-type": "kept", "x-death": "kept",
	}
	var forged []outbox.Event
	for _, name := range []string{"ce_id", "CE_TYPE", "Content-Type", "kafka_messageKey", "__TypeId__"} {
		f := event(topic, 1)
		f.Key = "forged-" + name
		f.Headers = map[string]string{name: "forged"}
		forged = append(forged, f)
	}
	res := b.PublishResults(ctxFor(t, 10*time.Second), append([]outbox.Event{e}, forged...))
	if res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	for i, r := range res[1:] {
		if !broker.IsPermanent(r.Err) || !errors.Is(r.Err, outbox.ErrReservedHeader) {
			t.Errorf("header %v: %v; want a permanent error wrapping outbox.ErrReservedHeader", forged[i].Headers, r.Err)
		}
	}
	rec, err := newReceiver(t, seeds, topic).next(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if string(rec.Key) != e.Key || !bytes.Equal(rec.Value, e.Payload) || rec.Partition != res[0].Partition || rec.Offset != res[0].Offset {
		t.Errorf("record key %q value %q at %d/%d; want key %q value %q at %d/%d", rec.Key, rec.Value, rec.Partition, rec.Offset, e.Key, e.Payload, res[0].Partition, res[0].Offset)
	}
	want := map[string]string{
		"ce_id":            e.EventID,
		"ce_source":        "/billing service",
		"ce_specversion":   "1.0",
		"ce_type":          "OrderPaid",
		"ce_time":          "2026-01-02T02:04:05.6Z",
		"content-type":     "application/json; charset=utf-8",
		"ce_schemaversion": "3",
		"ce_aggregatetype": "Order",
		"traceparent":      "00-abc-def-01",
		"Tenant":           "acme ✓",
		"X-Request-Id":     "req-1",
		"Nats-Msg-Id":      "kept",
		"ce-type":          "kept",
		"x-death":          "kept",
	}
	got := map[string]string{}
	for _, h := range rec.Headers {
		if _, dup := got[h.Key]; dup {
			t.Errorf("header %q sent twice", h.Key)
		}
		got[h.Key] = string(h.Value)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("headers:\n got %v\nwant %v", got, want)
	}
	msg, err := kafkamsg.FromRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if msg.EventID != e.EventID || msg.Type != e.Type || msg.Key != e.Key || msg.SchemaVersion != 3 || msg.ContentType != e.ContentType || msg.Headers["Tenant"] != "acme ✓" {
		t.Errorf("kafkamsg.FromRecord: %+v", msg)
	}
}

// A key's events all land on one partition, in order, each result naming
// the partition and offset a consumer finds the record at.
func TestPartitionAndOffsetPerKey(t *testing.T) {
	t.Parallel()
	_, seeds := startKafka(t)
	admin := client(t, seeds)
	topic := uniqueName("partitions")
	createTopic(t, admin, topic, 4)
	b := dial(t, seeds, kafkabroker.Config{})
	var events []outbox.Event
	for i := range 200 {
		e := event(topic, i)
		e.Key = fmt.Sprintf("k%d", i%10)
		events = append(events, e)
	}
	res := b.PublishResults(ctxFor(t, 20*time.Second), events)
	partOf := map[string]int32{}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("event %d: %v", i, r.Err)
		}
		if p, ok := partOf[events[i].Key]; ok && p != r.Partition {
			t.Fatalf("key %s on partitions %d and %d", events[i].Key, p, r.Partition)
		}
		partOf[events[i].Key] = r.Partition
	}
	parts := map[int32]bool{}
	for _, p := range partOf {
		parts[p] = true
	}
	if len(parts) < 2 {
		t.Errorf("10 keys all on partition(s) %v of 4", parts)
	}
	at := map[string]int{}
	for i, r := range res {
		at[fmt.Sprintf("%d/%d", r.Partition, r.Offset)] = i
	}
	rcv := newReceiver(t, seeds, topic)
	last := map[string]int{}
	for range events {
		rec, err := rcv.next(ctxFor(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		i, ok := at[fmt.Sprintf("%d/%d", rec.Partition, rec.Offset)]
		if !ok || string(rec.Value) != string(events[i].Payload) {
			t.Fatalf("record at %d/%d (%q) is not the one a result named", rec.Partition, rec.Offset, rec.Value)
		}
		if j, seen := last[string(rec.Key)]; seen && j > i {
			t.Fatalf("key %s: event %d read after event %d", rec.Key, i, j)
		}
		last[string(rec.Key)] = i
	}
}

// A topic the cluster does not have is permanent, with a message naming
// the fix; events on other topics of the batch are delivered.
func TestUnknownTopicIsPermanent(t *testing.T) {
	t.Parallel()
	_, seeds := startKafka(t)
	admin := client(t, seeds)
	topic := uniqueName("known")
	createTopic(t, admin, topic, 1)
	b := dial(t, seeds, kafkabroker.Config{})
	missing := uniqueName("missing")
	events := []outbox.Event{event(topic, 0), event(missing, 1), event(missing, 2), event(topic, 3)}
	events[1].Key, events[2].Key = "m1", "m2"
	start := time.Now()
	res := b.Publish(ctxFor(t, 20*time.Second), events)
	t.Logf("unknown topic answered in %v", time.Since(start).Round(time.Millisecond))
	if res[0] != nil || res[3] != nil {
		t.Errorf("events on an existing topic failed: %v, %v", res[0], res[3])
	}
	for _, err := range res[1:3] {
		if !broker.IsPermanent(err) || !errors.Is(err, kafkabroker.ErrTopicNotFound) || !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Fatalf("missing topic: %v; want a permanent error wrapping ErrTopicNotFound", err)
		}
		if want := fmt.Sprintf("Kafka topic %q does not exist; create it (outbox broker setup --broker kafka://HOST:9092 --topics %s)", missing, missing); !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}
}

// Kafka itself refuses a record above the topic's max.message.bytes (the
// adapter's own limit is larger): that event is permanent, and the later
// records of its partition that franz-go failed behind it are reported
// not attempted, never permanent, so the relay retries them untouched.
func TestRefusedRecordFailsItsPartitionAsNotAttempted(t *testing.T) {
	t.Parallel()
	_, seeds := startKafka(t)
	admin := client(t, seeds)
	topic := uniqueName("small")
	limit := "4000"
	if _, err := kadm.NewClient(admin).CreateTopic(ctxFor(t, 10*time.Second), 1, 1, map[string]*string{"max.message.bytes": &limit}, topic); err != nil {
		t.Fatal(err)
	}
	b := dial(t, seeds, kafkabroker.Config{})
	events := []outbox.Event{event(topic, 0), event(topic, 1), event(topic, 2)}
	events[0].Key, events[1].Key, events[2].Key = "big", "big", "other" // one partition: all three share it
	events[0].Payload = randomBytes(10_000)                             // incompressible: the producer compresses batches
	res := b.Publish(ctxFor(t, 20*time.Second), events)
	if !broker.IsPermanent(res[0]) || !errors.Is(res[0], kerr.MessageTooLarge) || !errors.Is(res[0], outbox.ErrPayloadTooLarge) || !strings.Contains(res[0].Error(), "max.message.bytes 4000") {
		t.Errorf("the oversize record: %v; want a permanent MESSAGE_TOO_LARGE naming the topic's limit", res[0])
	}
	for i, err := range res[1:] {
		if !errors.Is(err, broker.ErrNotAttempted) || broker.IsPermanent(err) {
			t.Errorf("event %d behind it: %v; want broker.ErrNotAttempted, not permanent", i+1, err)
		}
	}
	// The partition works again: the events that were not attempted go now.
	if res := b.Publish(ctxFor(t, 20*time.Second), events[1:]); res[0] != nil || res[1] != nil {
		t.Fatalf("republishing the events held back: %v", res)
	}
	rec, err := newReceiver(t, seeds, topic).next(ctxFor(t, 10*time.Second))
	if err != nil || string(rec.Value) != string(events[1].Payload) {
		t.Fatalf("first record on the topic: %v; want event 1", err)
	}
}

// A batch above the topic's limit whose records each fit is not any one
// event's fault: it is retried, and the error says how to configure the
// adapter.
func TestBatchAboveTopicLimitIsRetriedWithAdvice(t *testing.T) {
	t.Parallel()
	_, seeds := startKafka(t)
	admin := client(t, seeds)
	topic := uniqueName("batchlimit")
	limit := "20000"
	if _, err := kadm.NewClient(admin).CreateTopic(ctxFor(t, 10*time.Second), 1, 1, map[string]*string{"max.message.bytes": &limit}, topic); err != nil {
		t.Fatal(err)
	}
	b := dial(t, seeds, kafkabroker.Config{ClientID: "batchlimit", Options: []kgo.Opt{kgo.ProducerLinger(200 * time.Millisecond)}})
	var events []outbox.Event
	for i := range 10 {
		e := event(topic, i)
		e.Key = fmt.Sprintf("k%d", i)
		e.Payload = randomBytes(5000)
		events = append(events, e)
	}
	res := b.Publish(ctxFor(t, 20*time.Second), events)
	if res[0] == nil {
		t.Skip("the producer split the batch below the topic limit; nothing to check")
	}
	if broker.IsPermanent(res[0]) || !strings.Contains(res[0].Error(), "set the adapter's max_message") {
		t.Errorf("first record of a too-large batch: %v; want a retryable error with advice", res[0])
	}
}

func TestDialErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, want string }{
		{"kafka://127.0.0.1:9092?bogus=1", `unknown option "bogus"`},
		{"kafka://127.0.0.1:9092?max_message=big", `max_message="big"`},
		{"nats://127.0.0.1:9092", "the scheme must be kafka://"},
		{"kafka://127.0.0.1:9092/path", "is not host:port"},
		{"kafka://a:1,u:p@b:2", "only the first broker address"},
	} {
		_, err := kafkabroker.Dial(c.url, kafkabroker.Config{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Dial(%q): %v; want %q", c.url, err, c.want)
		}
	}
	start := time.Now()
	_, err := kafkabroker.Dial("kafka://admin:s3cr3t-pw@127.0.0.1:1", kafkabroker.Config{Timeout: 2 * time.Second})
	if err == nil || strings.Contains(err.Error(), "s3cr3t-pw") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("unreachable: %v; want an error naming the address, not the password", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("unreachable: took %v", d)
	}
}

func TestNewRefusesClientsThatBreakItsGuarantees(t *testing.T) {
	t.Parallel()
	_, seeds := startKafka(t)
	for name, opt := range map[string]kgo.Opt{
		"idempotence off": kgo.DisableIdempotentWrite(),
		"manual flushing": kgo.ManualFlushing(),
		"transactional":   kgo.TransactionalID("tx"),
	} {
		cl := client(t, seeds, opt)
		if _, err := kafkabroker.New(cl, kafkabroker.Config{}); err == nil {
			t.Errorf("%s: New accepted the client", name)
		}
	}
	cl := client(t, seeds, kgo.ProducerBatchMaxBytes(50_000))
	b, err := kafkabroker.New(cl, kafkabroker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if f := b.Features(); f.MaxMessage != 50_000 || f.Ordering != broker.OrderPartition {
		t.Errorf("Features = %+v; want the client's batch limit and OrderPartition", f)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The caller's client is still open: New does not own it.
	if err := cl.Ping(ctxFor(t, 5*time.Second)); err != nil {
		t.Errorf("the caller's client after Close: %v", err)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	_, seeds := startKafka(t)
	b := dial(t, seeds, kafkabroker.Config{MaxMessage: 2000})
	ok := outbox.Message{Topic: "orders.paid-v1", Key: "k", Type: "T", Payload: bytes.Repeat([]byte("x"), 1500)}.Normalized()
	if err := b.Check(ok); err != nil {
		t.Errorf("Check(ok): %v", err)
	}
	for name, m := range map[string]outbox.Message{
		"slash in topic": {Topic: "orders/paid", Type: "T"},
		"long topic":     {Topic: strings.Repeat("t", 250), Type: "T"},
		"dot topic":      {Topic: "..", Type: "T"},
		"too large":      {Topic: "t", Type: "T", Payload: bytes.Repeat([]byte("x"), 1900)},
		"reserved":       {Topic: "t", Type: "T", Headers: map[string]string{"ce_id": "x"}},
	} {
		var ve *outbox.ValidationError
		if err := b.Check(m.Normalized()); !errors.As(err, &ve) {
			t.Errorf("%s: Check = %v; want a *outbox.ValidationError", name, err)
		}
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// While no broker of the cluster answers, events come back as
// broker.ErrUnavailable, so the relay counts no attempt for an outage.
func TestClusterGoneIsUnavailable(t *testing.T) {
	t.Parallel()
	c, seeds := startKafka(t, kfake.NumBrokers(1))
	admin := client(t, seeds)
	topic := uniqueName("gone")
	createTopic(t, admin, topic, 1)
	b := dial(t, seeds, kafkabroker.Config{})
	if res := b.Publish(ctxFor(t, 10*time.Second), []outbox.Event{event(topic, 0)}); res[0] != nil {
		t.Fatal(res[0])
	}
	c.Close()
	start := time.Now()
	res := b.Publish(ctxFor(t, 1500*time.Millisecond), []outbox.Event{event(topic, 1), event(topic, 2)})
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Publish took %v with a 1.5s deadline", d)
	}
	for i, err := range res {
		if !errors.Is(err, broker.ErrUnavailable) || broker.IsPermanent(err) {
			t.Errorf("result %d with the cluster gone: %v; want broker.ErrUnavailable", i, err)
		}
	}
}
