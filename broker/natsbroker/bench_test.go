//go:build unix

package natsbroker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/internal/testenv"
)

// BenchmarkPublish compares, in one run, the adapter's Publish with the
// floor under it: raw JetStream PublishMsgAsync of the same subjects and
// payloads with only a Nats-Msg-Id header, every PubAck awaited. Each
// iteration sends one batch of 1,000 through each of the three paths in
// turn (the order rotating), so machine noise hits all of them alike:
//
//	raw       jetstream PublishMsgAsync + Nats-Msg-Id, await every future
//	adapter   Broker.Publish: topic, key, type, 200-byte JSON, no headers
//	headers   the same with 3 user headers
//
// It reports msgs/s for each, the adapter's ratio to raw, and the CPU time
// this process (the client: building, sending, reading acks, GC) spent per
// message on each path; the server's share is not in it. Run it against
// the shared server (OUTBOX_TEST_NATS, default 127.0.0.1:4222):
//
//	go test -run XXX -bench Publish -benchtime 100x ./broker/natsbroker/
func BenchmarkPublish(b *testing.B) {
	const batch = 1000
	url := testenv.Require(b, testenv.NATS)
	js, br, subject := benchStream(b, url, "natsbench")

	topic := subject + ".orders"
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

	futures := make([]jetstream.PubAckFuture, batch)
	rawPublish := func(msgs []*nats.Msg) {
		for j, m := range msgs {
			var err error
			if futures[j], err = js.PublishMsgAsync(m); err != nil {
				b.Fatalf("raw publish: %v", err)
			}
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatalf("raw publish: %v", err)
			}
		}
	}

	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}

	var raw, plain, headed time.Duration          // wall time
	var rawCPU, plainCPU, headedCPU time.Duration // this process's CPU time
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		rawBatch := events(i, nil)
		msgs := make([]*nats.Msg, batch)
		for j, e := range rawBatch {
			msgs[j] = &nats.Msg{Subject: e.Topic, Data: e.Payload, Header: nats.Header{jetstream.MsgIDHeader: {e.EventID}}}
		}
		plainBatch, headedBatch := events(i, nil), events(i, userHeaders)
		b.StartTimer()

		// Rotate the order, so that none of the three always follows the
		// batch preparation above (and its garbage).
		for k := range 3 {
			start, startCPU := time.Now(), cpu()
			switch (i + k) % 3 {
			case 0:
				rawPublish(msgs)
				raw += time.Since(start)
				rawCPU += cpu() - startCPU
			case 1:
				publish(b, br, plainBatch)
				plain += time.Since(start)
				plainCPU += cpu() - startCPU
			case 2:
				publish(b, br, headedBatch)
				headed += time.Since(start)
				headedCPU += cpu() - startCPU
			}
		}
	}
	b.StopTimer()
	n := float64(b.N * batch)
	rate := func(d time.Duration) float64 { return n / d.Seconds() }
	b.ReportMetric(rate(raw), "raw-msgs/s")
	b.ReportMetric(rate(plain), "adapter-msgs/s")
	b.ReportMetric(rate(headed), "headers-msgs/s")
	b.ReportMetric(rate(plain)/rate(raw), "adapter/raw")
	b.ReportMetric(rate(headed)/rate(raw), "headers/raw")
	b.ReportMetric(float64(rawCPU.Nanoseconds())/n, "raw-cpu-ns/msg")
	b.ReportMetric(float64(plainCPU.Nanoseconds())/n, "adapter-cpu-ns/msg")
	b.ReportMetric(float64(headedCPU.Nanoseconds())/n, "headers-cpu-ns/msg")
	b.ReportMetric(0, "ns/op") // the op is three batches; the rates above say more
}

func publish(b *testing.B, br *natsbroker.Broker, events []outbox.Event) {
	for j, err := range br.Publish(context.Background(), events) {
		if err != nil {
			b.Fatalf("publish of event %d: %v", j, err)
		}
	}
}

// BenchmarkPublishOne measures the cost of a one-event Publish call, which
// the relay makes for each event of one hot key, against the floor under
// it: a synchronous jetstream Publish of the same message with a
// Nats-Msg-Id. The two alternate in blocks of 100 calls (OUTBOX_BENCH_CALLS
// calls each, default 3000), so machine noise hits both alike. It reports
// the wall time per call, the CPU time per call of this process and of the
// nats-server processes on this machine (all of them: the shared server
// serves others too, so that figure is only meaningful on a quiet machine;
// it is counted in 10 ms ticks).
//
//	go test -run XXX -bench PublishOne -benchtime 1x ./broker/natsbroker/
func BenchmarkPublishOne(b *testing.B) {
	url := testenv.Require(b, testenv.NATS)
	calls := 3000
	if v := os.Getenv("OUTBOX_BENCH_CALLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("OUTBOX_BENCH_CALLS=%q: want a positive number", v)
		}
		calls = n
	}
	ctx := context.Background()
	js, br, subject := benchStream(b, url, "natsbench1")

	topic := subject + ".orders"
	payload := []byte(`{"order_id":42,"customer":"c-7","status":"PAID","pad":"` + strings.Repeat("x", 140) + `"}`)
	id := 0
	next := func() outbox.Event {
		id++
		m := outbox.Message{Topic: topic, Key: "hot", Type: "OrderPaid", Payload: payload}
		return outbox.Event{ID: int64(id), Message: m.Normalized(), CreatedAt: time.Now()}
	}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}

	type cost struct{ wall, self, server time.Duration }
	var adapter, raw cost
	measure := func(c *cost, f func()) {
		start, self, server := time.Now(), cpu(), natsServerCPU()
		f()
		c.wall += time.Since(start)
		c.self += cpu() - self
		c.server += natsServerCPU() - server
	}
	const block = 100
	b.ResetTimer()
	for range b.N {
		for done := 0; done < calls; done += block {
			measure(&adapter, func() {
				for range block {
					publish(b, br, []outbox.Event{next()})
				}
			})
			measure(&raw, func() {
				for range block {
					e := next()
					m := &nats.Msg{Subject: e.Topic, Data: e.Payload, Header: nats.Header{jetstream.MsgIDHeader: {e.EventID}}}
					if _, err := js.PublishMsg(ctx, m); err != nil {
						b.Fatalf("raw publish: %v", err)
					}
				}
			})
		}
	}
	b.StopTimer()
	n := float64(b.N * ((calls + block - 1) / block) * block)
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / n }
	b.ReportMetric(per(adapter.wall), "adapter-µs/call")
	b.ReportMetric(per(raw.wall), "raw-µs/call")
	b.ReportMetric(per(adapter.self), "adapter-cpu-µs/call")
	b.ReportMetric(per(raw.self), "raw-cpu-µs/call")
	b.ReportMetric(per(adapter.server), "adapter-server-cpu-µs/call")
	b.ReportMetric(per(raw.server), "raw-server-cpu-µs/call")
	b.ReportMetric(0, "ns/op")
}

// natsServerCPU is the CPU time used so far by the nats-server processes
// of this machine (from /proc, in clock ticks of 10 ms); 0 where there is
// no /proc.
func natsServerCPU() time.Duration {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var total time.Duration
	for _, d := range dirs {
		comm, err := os.ReadFile(d + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "nats-server" {
			continue
		}
		stat, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // after the command, which may hold spaces
		if len(f) < 13 {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(utime+stime) * 10 * time.Millisecond
	}
	return total
}

// benchStream creates a file stream of its own on the server at url (on
// prefix_<n>.>, deleted when b ends) and returns a jetstream client on a
// connection of its own, a Broker, and the stream's subject prefix.
func benchStream(b *testing.B, url, prefix string) (jetstream.JetStream, *natsbroker.Broker, string) {
	b.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	suffix := fmt.Sprint(time.Now().UnixNano() % 1_000_000_000)
	subject := prefix + "_" + suffix
	name := strings.ToUpper("NATSBROKER_" + prefix + "_" + suffix)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: []string{subject + ".>"}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute}); err != nil {
		b.Fatalf("create stream: %v", err)
	}
	b.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	br, err := natsbroker.Dial(url, natsbroker.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = br.Close(context.Background()) })
	return js, br, subject
}
