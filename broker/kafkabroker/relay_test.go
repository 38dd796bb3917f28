package kafkabroker_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/kafkabroker"
	"github.com/outbox-go/outbox/inbox/kafkamsg"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store/sqlitestore"
)

// requireKcat returns the path of Debian's kcat (librdkafka), failing the
// test under CI when it is missing (.ci/run installs it).
func requireKcat(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err != nil {
		msg := "kcat not found (apt-get install -y kcat); the test reads the relay's records with it as an independent Kafka client"
		if testenv.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// kcatRecord is one line of `kcat -C -J`.
type kcatRecord struct {
	Topic     string   `json:"topic"`
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	Headers   []string `json:"headers"` // name, value, name, value, …
	Key       *string  `json:"key"`
	Payload   *string  `json:"payload"`
}

// kcatAll reads every record of topic with kcat, from the beginning to
// the current end of each partition.
func kcatAll(t *testing.T, kcat, seeds, topic string) []kcatRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, "-b", seeds, "-C", "-t", topic, "-o", "beginning", "-e", "-J", "-q")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat: %v: %s", err, stderr.String())
	}
	var recs []kcatRecord
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r kcatRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("kcat line %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	return recs
}

// End to end: events committed to SQLite, delivered by relay.Run through
// the adapter to kfake on a real port, then read back twice: with
// franz-go (each record through inbox/kafkamsg) and with kcat, an
// independent client on librdkafka. Both must see every event once, each
// key's events in commit order on one partition, the payload unchanged,
// the key as record key and the CloudEvents headers and user headers.
func TestRelayToKafkaReadBackWithFranzGoAndKcat(t *testing.T) {
	kcat := requireKcat(t)
	_, seeds := startKafka(t)
	admin := client(t, seeds)
	topic := uniqueName("relay")
	createTopic(t, admin, topic, 4)

	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "outbox.db"), sqlitestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const n, keys = 600, 12
	var msgs []outbox.Message
	seq := map[string]int{}
	for i := range n {
		key := fmt.Sprintf("order-%d", i%keys)
		if i%50 == 0 {
			key = "" // keyless: any partition, no order
		}
		seq[key]++
		msgs = append(msgs, outbox.Message{
			EventID: outbox.NewEventID(), Topic: topic, Key: key, Type: "OrderBumped", AggregateType: "Order", SchemaVersion: 2,
			Payload: fmt.Appendf(nil, `{"key":%q,"seq":%d}`, key, seq[key]),
			Headers: map[string]string{"traceparent": fmt.Sprintf("00-%032x-%016x-01", i+1, i+1), "tenant": "acme ✓"},
		})
	}
	for i := 0; i < n; i += 100 {
		if err := st.Enqueue(ctx, msgs[i:i+100]...); err != nil {
			t.Fatal(err)
		}
	}

	b := dial(t, seeds, kafkabroker.Config{Source: "/orders"})
	r, err := relay.New(st, b, relay.Config{BatchSize: 100, Workers: 2, PollInterval: 20 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, err := st.Stats(ctx)
		if err == nil && s.Pending() == 0 && s.Dead == 0 {
			break
		}
		if err == nil && s.Dead > 0 {
			t.Fatalf("events went DEAD: %+v", s)
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay did not drain the outbox in 60s: %+v %v", s, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}

	byID := map[string]outbox.Message{}
	for _, m := range msgs {
		byID[m.EventID] = m
	}
	// check is what both readers must agree on.
	check := func(reader string, id, key string, partition int32, payload string, headers map[string]string, seen map[string]bool, lastSeq map[string]int, partOf map[string]int32) {
		t.Helper()
		m, ok := byID[id]
		switch {
		case !ok:
			t.Fatalf("%s: record with ce_id %q is no event of ours", reader, id)
		case seen[id]:
			t.Fatalf("%s: event %s read twice", reader, id)
		case key != m.Key || payload != string(m.Payload):
			t.Fatalf("%s: event %s: key %q payload %q, want %q %q", reader, id, key, payload, m.Key, m.Payload)
		}
		seen[id] = true
		for k, v := range map[string]string{
			"ce_type": "OrderBumped", "ce_source": "/orders", "ce_specversion": "1.0", "content-type": "application/json",
			"ce_schemaversion": "2", "ce_aggregatetype": "Order", "traceparent": m.Headers["traceparent"], "tenant": "acme ✓",
		} {
			if headers[k] != v {
				t.Fatalf("%s: event %s: header %s = %q, want %q", reader, id, k, headers[k], v)
			}
		}
		if _, err := time.Parse(time.RFC3339Nano, headers["ce_time"]); err != nil {
			t.Fatalf("%s: event %s: ce_time %q: %v", reader, id, headers["ce_time"], err)
		}
		if key == "" {
			return
		}
		if p, ok := partOf[key]; ok && p != partition {
			t.Fatalf("%s: key %s on partitions %d and %d", reader, key, p, partition)
		}
		partOf[key] = partition
		var body struct{ Seq int }
		_ = json.Unmarshal([]byte(payload), &body)
		if body.Seq != lastSeq[key]+1 {
			t.Fatalf("%s: key %s: seq %d after %d: out of order", reader, key, body.Seq, lastSeq[key])
		}
		lastSeq[key] = body.Seq
	}

	// franz-go, record by record through inbox/kafkamsg.
	rcv := newReceiver(t, seeds, topic)
	seen, lastSeq, partOf := map[string]bool{}, map[string]int{}, map[string]int32{}
	for range n {
		rec, err := rcv.next(ctxFor(t, 30*time.Second))
		if err != nil {
			t.Fatalf("franz-go: read %d of %d: %v", len(seen), n, err)
		}
		msg, err := kafkamsg.FromRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		hs := map[string]string{}
		for _, h := range rec.Headers {
			hs[h.Key] = string(h.Value)
		}
		if msg.Type != "OrderBumped" || msg.SchemaVersion != 2 {
			t.Fatalf("kafkamsg: %+v", msg)
		}
		check("franz-go", msg.EventID, string(rec.Key), rec.Partition, string(rec.Value), hs, seen, lastSeq, partOf)
	}
	franzParts := partOf

	// kcat, the independent client.
	recs := kcatAll(t, kcat, seeds, topic)
	if len(recs) != n {
		t.Fatalf("kcat read %d records, want %d", len(recs), n)
	}
	seen, lastSeq, partOf = map[string]bool{}, map[string]int{}, map[string]int32{}
	// kcat prints partition by partition; order is per partition.
	for _, r := range recs {
		hs := map[string]string{}
		for i := 0; i+1 < len(r.Headers); i += 2 {
			hs[r.Headers[i]] = r.Headers[i+1]
		}
		key := ""
		if r.Key != nil {
			key = *r.Key
		}
		payload := ""
		if r.Payload != nil {
			payload = *r.Payload
		}
		check("kcat", hs["ce_id"], key, r.Partition, payload, hs, seen, lastSeq, partOf)
	}
	for k, p := range partOf {
		if franzParts[k] != p {
			t.Errorf("key %s: franz-go read it on partition %d, kcat on %d", k, franzParts[k], p)
		}
	}
	if len(partOf) != keys {
		t.Errorf("kcat saw %d keys, want %d", len(partOf), keys)
	}
	t.Logf("kcat read %d records over %d keys on %d partitions (kfake)", len(recs), len(partOf), len(distinct(partOf)))
}

func distinct(m map[string]int32) map[int32]bool {
	out := map[int32]bool{}
	for _, v := range m {
		out[v] = true
	}
	return out
}
