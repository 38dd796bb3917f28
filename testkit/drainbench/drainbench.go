package drainbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// The backlog and the relay settings every adapter's drain uses.
const (
	// DefaultEvents is the backlog size unless OUTBOX_BENCH_EVENTS says otherwise.
	DefaultEvents = 100_000
	// Keys is how many aggregates the events are spread over (event i has key order-<i mod Keys>).
	Keys = 10_000
	// Batch is the relay's batch size and the raw baseline's batch size.
	Batch = 1000
	// DefaultWorkers is the relay's workers unless OUTBOX_BENCH_WORKERS says otherwise.
	DefaultWorkers = 3
)

// Payload is the 200-byte JSON payload of every event.
var Payload = []byte(`{"order_id":42,"customer":"c-7","status":"PAID","pad":"` + strings.Repeat("x", 140) + `"}`)

// Messages are n events on topic: type OrderPaid, Payload, keys over Keys aggregates.
func Messages(topic string, n int) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: topic, Key: fmt.Sprintf("order-%d", i%Keys), Type: "OrderPaid", Payload: Payload}
	}
	return msgs
}

// Harness is what an adapter's benchmark gives Run.
type Harness struct {
	// Topic is where the relay's events go.
	Topic string
	// Broker is the adapter under test, already connected.
	Broker broker.Broker
	// Raw publishes one batch with the broker's own client, the way a
	// careful hand-written producer would (every confirmation awaited),
	// and returns when the broker confirmed all of it. Run calls it for
	// consecutive batches of Batch messages, one at a time, then from
	// Workers goroutines at once: it must be safe for concurrent use.
	Raw func(batch []outbox.Message) error
	// Same, when set, is Raw carrying everything the adapter sends (its
	// properties and headers), built by hand: the broker's rate for the
	// same messages, which Raw's bare ones may overstate. Run calls it for
	// consecutive batches, one at a time.
	Same func(batch []outbox.Message) error
	// Server is the command name of the broker's server process on this
	// machine (as in /proc/PID/comm: "beam.smp", "redis-server"), whose
	// CPU time Run reports per event; "" when the server runs in this
	// process (kfake), where its CPU is counted with this process's.
	Server string
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q is not a positive number", name, v)
	}
	return n
}

// phase is what one timed run cost: wall time and CPU of this process, the
// broker's server and PostgreSQL.
type phase struct {
	wall                time.Duration
	self, server, pgCPU time.Duration
}

type cpuMark struct {
	at             time.Time
	self           time.Duration
	server, pgProc map[string]time.Duration
}

func mark(server string) cpuMark {
	m := cpuMark{at: time.Now(), self: selfCPU()}
	if server != "" {
		m.server = procCPU(server)
	}
	m.pgProc = procCPU("postgres")
	return m
}

// grown is the CPU time the processes of end used since start: all of a
// process that started meanwhile; one that ended meanwhile is not counted.
func grown(start, end map[string]time.Duration) time.Duration {
	var d time.Duration
	for pid, t := range end {
		d += t - start[pid]
	}
	return d
}

func since(m cpuMark, server string) phase {
	e := mark(server)
	return phase{wall: e.at.Sub(m.at), self: e.self - m.self, server: grown(m.server, e.server), pgCPU: grown(m.pgProc, e.pgProc)}
}

// Run measures, for h's broker, one after another: the raw client
// publishing the backlog's messages in consecutive batches of Batch (raw),
// the same with the adapter's properties (same, when h.Same is set), the
// same from Workers goroutines at once (rawpar: the broker's rate with
// as many batches in flight as the relay may have), the relay draining
// the backlog from a fresh PostgreSQL table through h.Broker (drain), and
// the same backlog drained into membroker (mem: PostgreSQL and the relay
// with no broker). It reports each rate, the drain's ratios to them, and
// the CPU time per event of this process (client and relay), of the
// broker's server and of the PostgreSQL processes (the shared server:
// other work on it is counted too; a backend that exits during a run is
// not) in each run.
func Run(b *testing.B, h Harness) {
	n := envInt(b, "OUTBOX_BENCH_EVENTS", DefaultEvents)
	workers := envInt(b, "OUTBOX_BENCH_WORKERS", DefaultWorkers)
	msgs := Messages(h.Topic, n)
	var raw, same, rawPar, drained, mem phase
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		o := fill(b, msgs)
		b.StartTimer()

		m := mark(h.Server)
		for j := 0; j < n; j += Batch {
			if err := h.Raw(msgs[j:min(j+Batch, n)]); err != nil {
				b.Fatalf("raw publish: %v", err)
			}
		}
		raw = add(raw, since(m, h.Server))

		if h.Same != nil {
			m = mark(h.Server)
			for j := 0; j < n; j += Batch {
				if err := h.Same(msgs[j:min(j+Batch, n)]); err != nil {
					b.Fatalf("raw publish with the adapter's properties: %v", err)
				}
			}
			same = add(same, since(m, h.Server))
		}

		m = mark(h.Server)
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					j := int(next.Add(Batch)) - Batch
					if j >= n {
						return
					}
					if err := h.Raw(msgs[j:min(j+Batch, n)]); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatalf("raw publish from %d goroutines: %v", workers, err)
		}
		rawPar = add(rawPar, since(m, h.Server))

		drained = add(drained, drain(b, o.Store, h.Broker, n, workers, h.Server))
		// Only one store is open at a time: an open store's commit probe
		// queries PostgreSQL every few milliseconds while a relay listens.
		b.StopTimer()
		o.Store.Close()
		om := fill(b, msgs)
		mb, err := membroker.New(membroker.Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		mem = add(mem, drain(b, om.Store, mb, n, workers, h.Server))
		om.Store.Close()
	}
	b.StopTimer()
	total := float64(b.N * n)
	rate := func(p phase) float64 { return total / p.wall.Seconds() }
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / total }
	b.ReportMetric(rate(raw), "raw-msgs/s")
	b.ReportMetric(rate(rawPar), "rawpar-msgs/s")
	b.ReportMetric(rate(drained), "drain-ev/s")
	b.ReportMetric(rate(mem), "mem-drain-ev/s")
	b.ReportMetric(rate(drained)/rate(raw), "drain/raw")
	b.ReportMetric(rate(drained)/rate(rawPar), "drain/rawpar")
	b.ReportMetric(rate(drained)/rate(mem), "drain/mem")
	phases := []struct {
		name string
		ph   phase
	}{{"raw", raw}, {"drain", drained}, {"mem", mem}}
	if h.Same != nil {
		b.ReportMetric(rate(same), "same-msgs/s")
		b.ReportMetric(rate(drained)/rate(same), "drain/same")
		phases = append(phases, phases[0])
		phases[len(phases)-1].name, phases[len(phases)-1].ph = "same", same
	}
	for _, p := range phases {
		b.ReportMetric(us(p.ph.self), p.name+"-self-µs/ev")
		if h.Server != "" {
			b.ReportMetric(us(p.ph.server), p.name+"-server-µs/ev")
		}
		if p.name == "drain" || p.name == "mem" {
			b.ReportMetric(us(p.ph.pgCPU), p.name+"-pg-µs/ev")
		}
	}
	// What the CPU alone allows: every core busy with nothing but this
	// drain's processes at the CPU per event measured.
	if cpu := us(drained.self + drained.server + drained.pgCPU); cpu > 0 {
		b.ReportMetric(float64(runtime.NumCPU())*1e6/cpu, "drain-cpu-limit-ev/s")
	}
	if cpu := us(raw.self + raw.server); cpu > 0 {
		b.ReportMetric(float64(runtime.NumCPU())*1e6/cpu, "raw-cpu-limit-msgs/s")
	}
	b.ReportMetric(0, "ns/op")
}

func add(a, b phase) phase {
	return phase{wall: a.wall + b.wall, self: a.self + b.self, server: a.server + b.server, pgCPU: a.pgCPU + b.pgCPU}
}

// fill enqueues msgs in a fresh PostgreSQL table, in transactions of Batch.
func fill(b *testing.B, msgs []outbox.Message) teststores.Opened {
	b.Helper()
	o := teststores.Open(b, "postgres", store.Options{})
	for i := 0; i < len(msgs); i += Batch {
		if err := o.Store.Enqueue(context.Background(), msgs[i:min(i+Batch, len(msgs))]...); err != nil {
			b.Fatal(err)
		}
	}
	return o
}

// settled counts the events the relay delivered and acked; done is closed
// when want were.
type settled struct {
	n, want int64
	done    chan struct{}
	once    sync.Once
}

func (s *settled) OnSettle(_ context.Context, r relay.BatchReport) {
	if atomic.AddInt64(&s.n, int64(r.Delivered)) >= s.want {
		s.once.Do(func() { close(s.done) })
	}
}

// drain runs the relay over st through br until it has delivered and
// acked n events (counted by a settle hook, so that the benchmark does not
// poll the table while it drains), then checks the table is empty.
func drain(b *testing.B, st driver.Store, br broker.Broker, n, workers int, server string) phase {
	b.Helper()
	s := &settled{want: int64(n), done: make(chan struct{})}
	r, err := relay.New(st, br, relay.Config{
		BatchSize: Batch, Workers: workers, PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Hooks: []relay.Hook{s},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	m := mark(server)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-s.done:
	case <-time.After(10 * time.Minute):
		stop()
		b.Fatalf("not drained after 10 minutes: %d of %d events delivered", atomic.LoadInt64(&s.n), n)
	}
	p := since(m, server)
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	stats, err := st.Stats(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	if stats.Pending() != 0 || stats.Dead != 0 {
		b.Fatalf("after the drain: %+v; want nothing pending and nothing DEAD", stats)
	}
	return p
}
