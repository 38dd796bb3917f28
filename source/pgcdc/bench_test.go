package pgcdc_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/internal/redact"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/source"
	"github.com/outbox-go/outbox/source/pgcdc"
)

// benchBroker is membroker, or, with PGCDC_BENCH_BROKER=nats://host:4222,
// NATS JetStream with a fresh stream capturing the returned topic.
func benchBroker(b *testing.B) (broker.Broker, string) {
	b.Helper()
	raw := os.Getenv("PGCDC_BENCH_BROKER")
	if raw == "" {
		mb, err := membroker.New(membroker.Config{})
		if err != nil {
			b.Fatal(err)
		}
		return mb, "bench"
	}
	if !strings.HasPrefix(raw, "nats://") {
		b.Fatalf("PGCDC_BENCH_BROKER: only nats:// URLs are supported, not %s", redact.URL(raw))
	}
	topic := testnats.NewStream(b, raw).Topic("bench")
	br, err := natsbroker.Dial(raw, natsbroker.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = br.Close(context.Background()) })
	return br, topic
}

// BenchmarkCDCDrain: 100,000 events committed in 1,000 transactions of 100
// before anything streams; then pg_recvlogical drains the changes from a
// slot of its own (the raw limit: decoding and sending, nothing done with
// them), and the source, from its slot created at the same point, delivers
// them through a broker and acknowledges them (table mode: the rows
// deleted). Reported: both rates and their ratio.
//
//	go test -run XXX -bench CDCDrain -benchtime 1x ./source/pgcdc/
func BenchmarkCDCDrain(b *testing.B) {
	for _, tableLess := range []bool{false, true} {
		name := "table"
		if tableLess {
			name = "tableless"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchDrain(b, tableLess, 100_000)
			}
		})
	}
}

func benchDrain(b *testing.B, tableLess bool, n int) {
	b.StopTimer()
	f := newBenchFixture(b, tableLess)
	ctx := context.Background()
	cfg := f.cfg.WithDefaults()
	if err := pgcdc.Setup(ctx, f.pool, f.cfg); err != nil {
		b.Fatal(err)
	}
	rawSlot := cfg.Slot + "_raw"
	for _, s := range []string{rawSlot, cfg.Slot} {
		if _, err := f.pool.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", s); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { dropSlot(context.Background(), b, f.pool, rawSlot) })

	br, topic := benchBroker(b)
	// fill
	const perTxn = 100
	em := pgcdc.Emitter{Prefix: cfg.Prefix}
	payload := []byte(strings.Repeat("x", 200))
	for i := 0; i < n; i += perTxn {
		if !tableLess {
			if _, err := f.pool.Exec(ctx, "INSERT INTO "+f.tableName()+" (topic, event_key, event_type, payload) SELECT $1, 'k' || (g % 5000), 'T', $2 FROM generate_series($3::int, $4::int) g",
				topic, payload, i, i+perTxn-1); err != nil {
				b.Fatal(err)
			}
			continue
		}
		msgs := make([]outbox.Message, perTxn)
		for j := range msgs {
			msgs[j] = outbox.Message{Topic: topic, Key: fmt.Sprint("k", (i+j)%5000), Type: "T", Payload: payload}
		}
		tx, err := f.pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := em.Enqueue(ctx, tx, msgs...); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var end string
	if err := f.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&end); err != nil {
		b.Fatal(err)
	}

	// the raw limit
	url := testenv.Require(b, testenv.Postgres)
	opts := []string{"-o", "proto_version=1", "-o", "publication_names=" + cfg.Publication}
	if tableLess {
		opts = append(opts, "-o", "messages=true")
	}
	args := append([]string{"-d", url, "--slot", rawSlot, "--start", "-E", end, "-f", os.DevNull, "--no-loop"}, opts...)
	began := time.Now()
	if out, err := exec.Command("pg_recvlogical", args...).CombinedOutput(); err != nil {
		b.Fatalf("pg_recvlogical: %v\n%s", err, out)
	}
	raw := time.Since(began)

	// the source
	var delivered atomic.Int64
	all := make(chan struct{})
	src, err := pgcdc.New(f.pool, f.cfg)
	if err != nil {
		b.Fatal(err)
	}
	acks := &ackWatch{Source: src}
	loop, err := relay.NewSource(acks, br, relay.Config{BatchSize: 1000, Workers: benchInFlight(), Logger: quietLogger(),
		Hooks: []relay.Hook{onConfirmed(func(outbox.Event) {
			if delivered.Add(1) == int64(n) {
				close(all)
			}
		})}})
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	began = time.Now()
	if err := src.Start(ctx); err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- loop.Run(runCtx) }()
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d delivered", delivered.Load(), n)
	}
	drain := time.Since(began)
	endLSN := acks.last.Load()
	for !tableLess && f.countB(b) > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	for a := acks.last.Load(); a < endLSN || a == 0; a = acks.last.Load() {
		time.Sleep(5 * time.Millisecond)
	}
	settled := time.Since(began)
	b.StopTimer()
	stop()
	<-done
	src.Close()
	rawRate := float64(n) / raw.Seconds()
	cdcRate := float64(n) / drain.Seconds()
	b.ReportMetric(rawRate, "raw_ev/s")
	b.ReportMetric(cdcRate, "cdc_ev/s")
	b.ReportMetric(100*cdcRate/rawRate, "%_of_raw")
	b.ReportMetric(float64(n)/settled.Seconds(), "settled_ev/s")
	b.Logf("%d events: pg_recvlogical %s (%.0f ev/s); source delivered in %s (%.0f ev/s, %.0f %% of raw), all acknowledged (rows deleted) in %s",
		n, raw.Round(time.Millisecond), rawRate, drain.Round(time.Millisecond), cdcRate, 100*cdcRate/rawRate, settled.Round(time.Millisecond))
}

// BenchmarkCDCLatency: one event per transaction at 1,000 events/s for
// 10 s; latency from the producer's COMMIT returning to the broker's
// confirmation (as the polling relay's benchmark measures it; an event
// confirmed before its COMMIT returned counts 0), and, apart, the COMMIT's
// own duration (its WAL flush: on a shared disk, the long tail) and the
// latency from just before the COMMIT, which adds the two.
//
//	go test -run XXX -bench CDCLatency -benchtime 1x ./source/pgcdc/
func BenchmarkCDCLatency(b *testing.B) {
	for _, tableLess := range []bool{false, true} {
		name := "table"
		if tableLess {
			name = "tableless"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchLatency(b, tableLess, 1000, 10*time.Second)
			}
		})
	}
}

func benchLatency(b *testing.B, tableLess bool, rate int, d time.Duration) {
	f := newBenchFixture(b, tableLess)
	ctx := context.Background()
	br, topic := benchBroker(b)
	n := int(float64(rate) * d.Seconds())
	sent := make([]atomic.Int64, n+1)      // by payload number: UnixNano before COMMIT
	committed := make([]atomic.Int64, n+1) // … and after COMMIT returned
	confirmed := make([]atomic.Int64, n+1) // … and at the broker's confirmation
	received := make([]atomic.Int64, n+1)  // … and when the source decoded its commit
	pgcdc.SetPushHook(func(evs []outbox.Event) {
		now := time.Now().UnixNano()
		for _, e := range evs {
			var i int
			fmt.Sscan(string(e.Payload), &i)
			if i > 0 && i <= n {
				received[i].Store(now)
			}
		}
	})
	defer pgcdc.SetPushHook(nil)
	lat := make(chan int, n)
	src, err := pgcdc.New(f.pool, f.cfg)
	if err != nil {
		b.Fatal(err)
	}
	loop, err := relay.NewSource(src, br, relay.Config{Logger: quietLogger(), Workers: benchInFlight(),
		Hooks: []relay.Hook{onConfirmed(func(e outbox.Event) {
			var i int
			fmt.Sscan(string(e.Payload), &i)
			if i > 0 && i <= n {
				confirmed[i].Store(time.Now().UnixNano())
				lat <- i
			}
		})}})
	if err != nil {
		b.Fatal(err)
	}
	if err := src.Start(ctx); err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- loop.Run(runCtx) }()
	defer func() { stop(); <-done; src.Close() }()
	ins := "INSERT INTO " + f.tableName() + " (topic, event_key, event_type, payload) VALUES ($1, $2, 'T', $3)"
	// the server's WAL rate (every database: the walsender reads it all, in
	// order, to find this one's commits)
	var walStart, walEnd pglogrepl.LSN
	if err := f.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&walStart); err != nil {
		b.Fatal(err)
	}
	// 4 producers, each paced to rate/4
	const producers = 4
	errs := make(chan error, producers)
	start := time.Now()
	for p := 0; p < producers; p++ {
		go func(p int) {
			for i := p + 1; i <= n; i += producers {
				due := start.Add(time.Duration(i-1) * time.Second / time.Duration(rate))
				time.Sleep(time.Until(due))
				tx, err := f.pool.Begin(ctx)
				if err != nil {
					errs <- err
					return
				}
				if tableLess {
					err = pgcdc.Emitter{Prefix: f.cfg.Prefix}.Enqueue(ctx, tx, outbox.Message{Topic: topic, Key: fmt.Sprint("k", i%100), Type: "T", Payload: []byte(fmt.Sprint(i))})
				} else {
					_, err = tx.Exec(ctx, ins, topic, fmt.Sprint("k", i%100), []byte(fmt.Sprint(i)))
				}
				if err != nil {
					errs <- err
					return
				}
				sent[i].Store(time.Now().UnixNano())
				if err := tx.Commit(ctx); err != nil {
					errs <- err
					return
				}
				committed[i].Store(time.Now().UnixNano())
			}
			errs <- nil
		}(p)
	}
	for p := 0; p < producers; p++ {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	achieved := float64(n) / time.Since(start).Seconds()
	if err := f.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&walEnd); err != nil {
		b.Fatal(err)
	}
	walRate := float64(walEnd-walStart) / time.Since(start).Seconds() / 1e6
	got := 0
	timeout := time.After(60 * time.Second)
	for got < n {
		select {
		case <-lat:
			got++
		case <-timeout:
			b.Fatalf("%d of %d delivered", got, n)
		}
	}
	var after, before, commit, wal, relay []time.Duration
	for i := 1; i <= n; i++ {
		c, s0, done, rec := committed[i].Load(), sent[i].Load(), confirmed[i].Load(), received[i].Load()
		after = append(after, time.Duration(max(done-c, 0)))
		before = append(before, time.Duration(done-s0))
		commit = append(commit, time.Duration(c-s0))
		wal = append(wal, time.Duration(rec-s0))
		relay = append(relay, time.Duration(done-rec))
	}
	for _, l := range [][]time.Duration{after, before, commit, wal, relay} {
		slices.Sort(l)
	}
	q := func(l []time.Duration, p float64) time.Duration { return l[min(len(l)-1, int(p*float64(len(l))))] }
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(q(after, 0.50)), "p50_ms")
	b.ReportMetric(ms(q(after, 0.99)), "p99_ms")
	b.ReportMetric(ms(after[n-1]), "max_ms")
	b.ReportMetric(ms(q(before, 0.99)), "p99_from_before_commit_ms")
	b.ReportMetric(ms(q(commit, 0.99)), "commit_p99_ms")
	b.ReportMetric(ms(q(wal, 0.99)), "p99_to_decoded_ms")
	b.ReportMetric(ms(q(relay, 0.99)), "p99_decoded_to_confirmed_ms")
	b.ReportMetric(achieved, "ev/s")
	b.ReportMetric(walRate, "server_wal_MB/s")
	b.Logf("server WAL %.1f MB/s; %d events at %.0f ev/s (target %d): commit returned → broker confirmation p50 %s, p99 %s, max %s; from before COMMIT p50 %s, p99 %s; COMMIT itself p50 %s, p99 %s, max %s; before COMMIT → decoded by the source p50 %s, p99 %s; decoded → confirmed p50 %s, p99 %s",
		walRate, n, achieved, rate, q(after, 0.5), q(after, 0.99), after[n-1], q(before, 0.5), q(before, 0.99), q(commit, 0.5), q(commit, 0.99), commit[n-1],
		q(wal, 0.5), q(wal, 0.99), q(relay, 0.5), q(relay, 0.99))
}

// newBenchFixture is newFixture for a benchmark.
func newBenchFixture(b *testing.B, tableLess bool) *fixture {
	return newFixtureTB(b, tableLess)
}

func (f *fixture) tableName() string { return pgx.Identifier{f.cfg.Table}.Sanitize() }

func (f *fixture) countB(b *testing.B) int {
	var n int
	if err := f.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+f.tableName()).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// benchInFlight is PGCDC_BENCH_INFLIGHT (the relay's Workers: publish
// calls in flight), or the default.
func benchInFlight() int {
	var n int
	fmt.Sscan(os.Getenv("PGCDC_BENCH_INFLIGHT"), &n)
	return n
}

// onConfirmed is a publish hook told each event the broker confirmed.
type onConfirmed func(outbox.Event)

func (f onConfirmed) OnPublishEnd(_ context.Context, p relay.PublishInfo) {
	for i, r := range p.Results {
		if r.Err == nil {
			f(p.Events[i])
		}
	}
}

// ackWatch is a Source that remembers the last Position acknowledged.
type ackWatch struct {
	*pgcdc.Source
	last atomic.Uint64
}

func (a *ackWatch) Ack(ctx context.Context, pos source.Position) error {
	err := a.Source.Ack(ctx, pos)
	if err == nil {
		a.last.Store(uint64(pos))
	}
	return err
}
