package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// PostgreSQL → two `outbox relay` processes → Kafka (kfake, in this test
// process, on real 127.0.0.1 ports). One relay is SIGKILLed mid-stream
// twice and restarted. Every committed event is then read back with
// franz-go and with kcat (librdkafka): none lost, and the first delivery
// of each key's events in commit order, on one partition.
func TestKafkaRelaysOneKilledTwice(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		if testenv.InCI() {
			t.Fatal("kcat not found (apt-get install -y kcat): the test reads the records back with it")
		}
		t.Skip("kcat not found (apt-get install -y kcat)")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := strings.Join(c.ListenAddrs(), ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	topic := "orders_" + strings.ToLower(teststores.UniqueTable("k"))
	if _, err := adm.CreateTopic(ctx, 4, 1, nil, topic); err != nil {
		t.Fatal(err)
	}

	o := teststores.Open(t, "postgres", store.Options{})
	msgs := keyedWorkload(t, o.Store, topic, 3000, 40)
	args := relayArgs(o, "kafka://"+seeds)
	relays := []*proc{startRelay(t, args...), startRelay(t, args...)}
	count := func() int64 {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return 0
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
		return n
	}
	for _, at := range []int64{600, 1800} {
		deadline := time.Now().Add(60 * time.Second)
		for count() < at {
			if time.Now().After(deadline) {
				t.Fatalf("topic stuck below %d records; relay stderr:\n%s", at, relays[0].stderr)
			}
			time.Sleep(5 * time.Millisecond)
		}
		relays[0].kill()
		relays[0] = startRelay(t, args...)
	}
	waitPending0(t, o.Store, 90*time.Second)
	for _, r := range relays {
		if d := r.stop(t); d > 10*time.Second {
			t.Errorf("graceful stop took %s, promised ≤ 10s", d)
		}
	}
	total := count()

	// check asserts, for one reader's records in partition order, that
	// every event arrived and each key's first deliveries are in order on
	// one partition.
	check := func(reader string, recs []readRecord) {
		t.Helper()
		seen := map[string]bool{}
		next := map[string]int{}
		part := map[string]int32{}
		for _, r := range recs {
			key, n, _ := strings.Cut(r.payload, "#")
			if r.key != key || r.ceID == "" {
				t.Fatalf("%s: record %q has key %q, ce_id %q", reader, r.payload, r.key, r.ceID)
			}
			if p, ok := part[key]; ok && p != r.partition {
				t.Fatalf("%s: key %s on partitions %d and %d", reader, key, p, r.partition)
			}
			part[key] = r.partition
			if seen[r.payload] {
				continue
			}
			seen[r.payload] = true
			var seq int
			fmt.Sscan(n, &seq)
			if seq != next[key]+1 {
				t.Errorf("%s: key %s: event #%d delivered first after #%d: order broken", reader, key, seq, next[key])
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
			t.Errorf("%s: %d of %d events never reached Kafka", reader, lost, len(msgs))
		}
		t.Logf("%s read %d records for %d events (kfake; the duplicates are re-publishes after the SIGKILLs)", reader, len(recs), len(msgs))
	}

	// franz-go
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var franz []readRecord
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for int64(len(franz)) < total && rctx.Err() == nil {
		cons.PollFetches(rctx).EachRecord(func(r *kgo.Record) {
			rr := readRecord{partition: r.Partition, key: string(r.Key), payload: string(r.Value)}
			for _, h := range r.Headers {
				if h.Key == "ce_id" {
					rr.ceID = string(h.Value)
				}
			}
			franz = append(franz, rr)
		})
	}
	check("franz-go", franz)

	// kcat
	cmd := exec.CommandContext(rctx, kcat, "-b", seeds, "-C", "-t", topic, "-o", "beginning", "-e", "-J", "-q")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat: %v: %s", err, stderr.String())
	}
	var viaKcat []readRecord
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var j struct {
			Partition int32    `json:"partition"`
			Key       string   `json:"key"`
			Payload   string   `json:"payload"`
			Headers   []string `json:"headers"`
		}
		if err := json.Unmarshal(line, &j); err != nil {
			t.Fatalf("kcat line %q: %v", line, err)
		}
		rr := readRecord{partition: j.Partition, key: j.Key, payload: j.Payload}
		for i := 0; i+1 < len(j.Headers); i += 2 {
			if j.Headers[i] == "ce_id" {
				rr.ceID = j.Headers[i+1]
			}
		}
		viaKcat = append(viaKcat, rr)
	}
	if int64(len(viaKcat)) != total {
		t.Errorf("kcat read %d records; the topic holds %d", len(viaKcat), total)
	}
	check("kcat", viaKcat)
}

type readRecord struct {
	partition    int32
	key, payload string
	ceID         string
}
