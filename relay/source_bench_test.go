package relay_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/source"
)

// BenchmarkSource: the log loop's own cost per event, 100,000 events of 5,000
// keys in transactions of 100, through membroker.
//
//	go test -run XXX -bench Source -benchmem ./relay/
func BenchmarkSource(b *testing.B) {
	const n, perTxn = 100_000, 100
	txns := make([]source.Txn, 0, n/perTxn)
	for i := 0; i < n; i += perTxn {
		t := source.Txn{Pos: source.Position(i + 1)}
		for j := i; j < i+perTxn; j++ {
			t.Events = append(t.Events, outbox.Event{ID: int64(j + 1), Message: outbox.Message{EventID: outbox.NewEventID(), Topic: "t",
				Key: fmt.Sprint("k", j%5000), Type: "T", Payload: make([]byte, 200), SchemaVersion: 1, ContentType: outbox.DefaultContentType}})
		}
		txns = append(txns, t)
	}
	for i := 0; i < b.N; i++ {
		mb, _ := membroker.New(membroker.Config{})
		src := newMemSource(txns...)
		l, err := relay.NewSource(src, mb, relay.Config{BatchSize: 1000, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		for src.lastAck() != source.Position(n-perTxn+1) {
			time.Sleep(time.Millisecond)
		}
		cancel()
		<-done
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "ev/s")
}

// BenchmarkSourceHotKey: 2,000 events of one key, committed one per
// transaction every 100µs, through a key-ordered membroker that takes 1ms
// per call. To keep up, the loop must send the key's events that waited
// meanwhile together, in one call.
//
//	go test -run XXX -bench SourceHotKey ./relay/
func BenchmarkSourceHotKey(b *testing.B) {
	const n = 2000
	calls := 0
	for i := 0; i < b.N; i++ {
		mb, _ := membroker.New(membroker.Config{KeyOrdered: true, Latency: time.Millisecond})
		src := newMemSource()
		l, err := relay.NewSource(src, mb, relay.Config{Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		t0 := time.Now()
		for j := 1; j <= n; j++ {
			src.add(source.Txn{Pos: source.Position(j), Events: []outbox.Event{{ID: int64(j), Message: outbox.Message{EventID: outbox.NewEventID(),
				Topic: "t", Key: "hot", Type: "T", Payload: []byte("{}"), SchemaVersion: 1, ContentType: outbox.DefaultContentType}}}})
			for time.Since(t0) < time.Duration(j)*100*time.Microsecond {
				runtime.Gosched()
			}
		}
		for src.lastAck() != n {
			time.Sleep(time.Millisecond)
		}
		cancel()
		<-done
		calls += mb.Stats().Calls
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "ev/s")
	b.ReportMetric(float64(n)*float64(b.N)/float64(calls), "ev/call")
}
