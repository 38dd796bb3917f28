//go:build unix

package redisbroker_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/redisbroker"
	"github.com/outbox-go/outbox/internal/testenv"
)

// BenchmarkPublish compares, in one run, the adapter's Publish with the
// floor under it: a raw go-redis pipeline of plain XADDs carrying only the
// payload and the event id, every reply read. Each iteration sends one
// batch of 1,000 through each path in turn (the order rotating, so machine
// noise hits all alike):
//
//	raw      go-redis pipeline: XADD stream * data <payload> ce_id <id>
//	rawfull  the same with every field the adapter sends, built beforehand
//	plain    Broker.Publish with NoDedup: every field (CloudEvents, key, 3 headers)
//	dedup    Broker.Publish with the dedup script (the default)
//
// It reports msgs/s for each, each adapter path's ratio to raw, and the
// CPU time this process spent per message. Against the shared server
// (OUTBOX_TEST_REDIS, default 127.0.0.1:6379):
//
//	go test -run XXX -bench Publish -benchtime 100x ./broker/redisbroker/
func BenchmarkPublish(b *testing.B) {
	const batch = 1000
	url := testenv.Require(b, testenv.Redis)
	opt, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	stream := fmt.Sprint("rb_bench_", time.Now().UnixNano())
	defer func() {
		rdb.Del(ctx, stream)
		iter := rdb.Scan(ctx, 0, redisbroker.DefaultDedupPrefix+"{"+stream+"}:*", 10000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			if keys = append(keys, iter.Val()); len(keys) == 1000 {
				rdb.Del(ctx, keys...)
				keys = keys[:0]
			}
		}
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	}()
	plain, err := redisbroker.Dial(url, redisbroker.Config{NoDedup: true, MaxLen: 100_000})
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Close(ctx)
	dedup, err := redisbroker.Dial(url, redisbroker.Config{MaxLen: 100_000, DedupWindow: 10 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer dedup.Close(ctx)

	payload := []byte(`{"order_id":42,"customer":"c-7","status":"PAID","pad":"` + strings.Repeat("x", 140) + `"}`)
	headers := map[string]string{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tenant":      "acme",
		"causation":   "0192f6c4-8a59-7c3e-9f3b-6a1e2d3c4b5a",
	}
	events := func(i int) []outbox.Event {
		ev := make([]outbox.Event, batch)
		for j := range ev {
			m := outbox.Message{Topic: stream, Key: fmt.Sprintf("order-%d", (i*batch+j)%5000), Type: "OrderPaid", Payload: payload, Headers: headers}
			ev[j] = outbox.Event{ID: int64(i*batch + j + 1), Message: m.Normalized(), CreatedAt: time.Now()}
		}
		return ev
	}
	raw := func(ev []outbox.Event) {
		pipe := rdb.Pipeline()
		for j := range ev {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, MaxLen: 100_000, Approx: true, Values: []any{"data", ev[j].Payload, "ce_id", ev[j].EventID}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatalf("raw pipeline: %v", err)
		}
	}
	// full is raw with every field the adapter sends, built beforehand.
	full := func(vals [][]any) {
		pipe := rdb.Pipeline()
		for _, v := range vals {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, MaxLen: 100_000, Approx: true, Values: v})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatalf("raw pipeline: %v", err)
		}
	}
	fieldsOf := func(ev []outbox.Event) [][]any {
		out := make([][]any, len(ev))
		for j, e := range ev {
			v := []any{"data", e.Payload, "ce_id", e.EventID, "ce_source", "outbox", "ce_specversion", "1.0", "ce_type", e.Type,
				"ce_time", e.CreatedAt.UTC().Format(time.RFC3339Nano), "content_type", e.ContentType, "key", e.Key, "ce_schemaversion", "1"}
			for k, h := range e.Headers {
				v = append(v, "h:"+k, h)
			}
			out[j] = v
		}
		return out
	}
	publish := func(br *redisbroker.Broker, ev []outbox.Event) {
		for j, err := range br.Publish(ctx, ev) {
			if err != nil {
				b.Fatalf("publish of event %d: %v", j, err)
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
	var wall, cpus [4]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		batches := [4][]outbox.Event{events(4 * i), events(4*i + 1), events(4*i + 2), events(4*i + 3)}
		fullVals := fieldsOf(batches[3])
		b.StartTimer()
		for k := range 4 {
			path := (i + k) % 4
			start, startCPU := time.Now(), cpu()
			switch path {
			case 0:
				raw(batches[0])
			case 1:
				publish(plain, batches[1])
			case 2:
				publish(dedup, batches[2])
			case 3:
				full(fullVals)
			}
			wall[path] += time.Since(start)
			cpus[path] += cpu() - startCPU
		}
	}
	b.StopTimer()
	n := float64(b.N * batch)
	rate := func(d time.Duration) float64 { return n / d.Seconds() }
	b.ReportMetric(rate(wall[0]), "raw-msgs/s")
	b.ReportMetric(rate(wall[3]), "rawfull-msgs/s")
	b.ReportMetric(rate(wall[1])/rate(wall[3]), "plain/rawfull")
	b.ReportMetric(rate(wall[1]), "plain-msgs/s")
	b.ReportMetric(rate(wall[2]), "dedup-msgs/s")
	b.ReportMetric(rate(wall[1])/rate(wall[0]), "plain/raw")
	b.ReportMetric(rate(wall[2])/rate(wall[0]), "dedup/raw")
	b.ReportMetric(float64(cpus[0].Nanoseconds())/n, "raw-cpu-ns/msg")
	b.ReportMetric(float64(cpus[3].Nanoseconds())/n, "rawfull-cpu-ns/msg")
	b.ReportMetric(float64(cpus[1].Nanoseconds())/n, "plain-cpu-ns/msg")
	b.ReportMetric(float64(cpus[2].Nanoseconds())/n, "dedup-cpu-ns/msg")
	b.ReportMetric(0, "ns/op")
}
