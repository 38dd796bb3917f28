package bench_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox/cmd/outbox/internal/bench"
	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// A small run end to end, so that `outbox bench` cannot rot: every figure
// is measured and positive. (The figures themselves are for BENCHMARKS.md.)
func TestRunSmall(t *testing.T) {
	var out strings.Builder
	c := bench.Config{
		DBURL: teststores.URL(t, "postgres"), BrokerURL: testnats.Shared(t),
		Events: 3000, Rate: 200, Duration: time.Second, Out: &out,
		OpenStore: wire.OpenStore, SQLDB: wire.SQLDB,
	}
	res, err := bench.Run(context.Background(), c)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if res.RawSQLRate <= 0 || res.RawBrokerRate <= 0 || res.DrainRate <= 0 || res.NaiveRate <= 0 || res.NaiveWorkers != 3 || res.LatencyCount != 200 || res.LatencyP50 <= 0 || res.LatencyP99 < res.LatencyP50 {
		t.Errorf("implausible result %+v", res)
	}
	t.Log(res.Summary(c))
}

// BenchmarkRelayDrain is `outbox bench` as a Go benchmark:
// go test -run XXX -bench RelayDrain -benchtime 1x ./cmd/outbox/internal/bench/
func BenchmarkRelayDrain(b *testing.B) {
	c := bench.Config{
		DBURL: teststores.URL(b, "postgres"), BrokerURL: testnats.Shared(b),
		Events: 100_000, Duration: 10 * time.Second,
		OpenStore: wire.OpenStore, SQLDB: wire.SQLDB,
	}
	for i := 0; i < b.N; i++ {
		res, err := bench.Run(context.Background(), c)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(res.DrainRate, "ev/s")
		b.ReportMetric(100*res.DrainRate/res.RawSQLRate, "%of-raw-sql")
		b.ReportMetric(res.RawSQLRate, "raw-sql-rows/s")
		b.ReportMetric(res.RawBrokerRate, "raw-broker-msgs/s")
		b.ReportMetric(float64(res.LatencyP50.Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(res.LatencyP99.Microseconds())/1000, "p99-ms")
	}
}

// The same with relay processes, hot keys and plain-SQL producers, as
// `outbox bench --relays 2 --keys 10 --producer sql` runs it.
func TestRunWithRelayProcesses(t *testing.T) {
	bin := buildOutbox(t)
	var out strings.Builder
	c := bench.Config{
		DBURL: teststores.URL(t, "postgres"), BrokerURL: testnats.Shared(t),
		Events: 3000, Rate: 200, Duration: time.Second, Warmup: 500 * time.Millisecond, Out: &out,
		Keys: 10, Relays: 2, Producer: "sql", RelayArgs: []string{"--poll", "20ms"},
		RelayCommand: func(ctx context.Context, args []string) *exec.Cmd { return exec.CommandContext(ctx, bin, args...) },
		OpenStore:    wire.OpenStore, SQLDB: wire.SQLDB,
	}
	res, err := bench.Run(context.Background(), c)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	// The warm-up's 100 events are delivered and reported apart, not counted.
	if res.DrainRate <= 0 || res.LatencyCount != 200 || res.LatencyAt != "consumer receipt" || res.LatencyP99 < res.LatencyP50 ||
		res.WarmupMax <= 0 || res.WarmupP99 > res.WarmupMax || res.FloorP50 <= 0 || res.FloorP99 < res.FloorP50 {
		t.Errorf("implausible result %+v", res)
	}
	// what the relay processes used: a resident set each (a Go program
	// is more than a few MiB), and CPU
	if u := res.DrainUsage; len(u.PeakRSS) != 2 || u.PeakRSS[0] < 4<<20 || u.PeakRSS[1] < 4<<20 || u.CPU <= 0 {
		t.Errorf("the drain's usage by the 2 relay processes is implausible: %+v", u)
	}
	if sum := res.Summary(c); !strings.Contains(sum, "2 relay processes, 10 keys, sql producer") {
		t.Errorf("the summary does not name the relays, keys and producer: %s", sum)
	}
	t.Log(res.Summary(c))
}

// TestRunErrorsHideSecrets: `outbox bench --broker kafka://u:pw@…` used to
// print the password; no broker URL's secret reaches an error.
func TestRunErrorsHideSecrets(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	for _, c := range []struct{ broker, says string }{
		{"kafka://alice:S3CRET@h1:9092,h2:9092", "kafka://alice:xxxxx@h1:9092,h2:9092"},
		{"nats://S3CRET@" + closed, "nats://xxxxx@" + closed},
		{"nats://alice:S3CRET@" + closed, "nats://alice:xxxxx@" + closed},
		{"kafka://alice:S3CRET@" + closed, "kafka://alice:xxxxx@" + closed},
		// not measured by bench: the message says what is
		{"redis://:S3CRET@" + closed + "/0", "redis://:xxxxx@" + closed + "/0"},
		{"amqp://alice:S3CRET@" + closed + "/", "kfake"},
	} {
		var out strings.Builder
		_, err := bench.Run(context.Background(), bench.Config{
			DBURL: teststores.URL(t, "postgres"), BrokerURL: c.broker, Events: 10, Out: &out,
			OpenStore: wire.OpenStore, SQLDB: wire.SQLDB,
		})
		if err == nil {
			t.Fatalf("bench with --broker %s succeeded", c.says)
		}
		t.Log(err)
		if msg := err.Error() + out.String(); strings.Contains(msg, "S3CRET") || !strings.Contains(msg, c.says) {
			t.Errorf("--broker %s: %q; want it to name %s and hide the secret", c.says, msg, c.says)
		}
	}
}

// buildOutbox builds the outbox command, for relay processes.
func buildOutbox(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "outbox")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/outbox-go/outbox/cmd/outbox").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// `outbox bench --broker kfake`: an in-process Kafka for machines without
// one, with the relay in this process and as a process of its own (which
// gets kafka://<kfake's address>); every line with a figure through Kafka
// says it is kfake.
func TestRunKfake(t *testing.T) {
	bin := buildOutbox(t)
	for _, relays := range []int{0, 1} {
		t.Run(fmt.Sprintf("relays=%d", relays), func(t *testing.T) {
			var out strings.Builder
			c := bench.Config{
				DBURL: teststores.URL(t, "postgres"), BrokerURL: "kfake",
				Events: 3000, Rate: 200, Duration: time.Second, Warmup: 500 * time.Millisecond, Out: &out,
				Keys: 10, Relays: relays, Partitions: 4,
				RelayCommand: func(ctx context.Context, args []string) *exec.Cmd { return exec.CommandContext(ctx, bin, args...) },
				OpenStore:    wire.OpenStore, SQLDB: wire.SQLDB,
			}
			res, err := bench.Run(context.Background(), c)
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if res.RawSQLRate <= 0 || res.RawBrokerRate <= 0 || res.DrainRate <= 0 || res.LatencyCount != 200 || res.LatencyP50 <= 0 || res.LatencyP99 < res.LatencyP50 ||
				res.WarmupMax <= 0 || res.FloorP50 <= 0 || res.FloorP99 < res.FloorP50 || res.Broker != bench.KfakeLabel || res.Partitions != 4 {
				t.Errorf("implausible result %+v", res)
			}
			if want := map[int]string{0: "broker ack", 1: "consumer receipt"}[relays]; res.LatencyAt != want {
				t.Errorf("latency ends at %q, want %q", res.LatencyAt, want)
			}
			sum := res.Summary(c)
			for _, line := range append(strings.Split(strings.TrimSpace(out.String()), "\n"), sum) {
				if strings.Contains(line, "msgs/s") || strings.Contains(line, "ev/s") {
					if !strings.Contains(line, "(kfake, in-process)") {
						t.Errorf("a line with a Kafka figure does not say kfake: %s", line)
					}
				}
			}
			if !strings.Contains(sum, "with 4 partitions") || !strings.Contains(sum, "1 synchronous Kafka produce") {
				t.Errorf("the summary does not name the partitions and the floor: %s", sum)
			}
			t.Log(sum)
		})
	}
}

// With a kafka:// URL the run creates its topics with --partitions on that
// cluster, and deletes them after it.
func TestRunKafkaDeletesItsTopics(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	url := "kafka://" + strings.Join(cluster.ListenAddrs(), ",")
	var out strings.Builder
	c := bench.Config{
		DBURL: teststores.URL(t, "postgres"), BrokerURL: url,
		Events: 1000, Rate: 100, Duration: time.Second, Partitions: 3, Out: &out,
		OpenStore: wire.OpenStore, SQLDB: wire.SQLDB,
	}
	res, err := bench.Run(context.Background(), c)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if res.Broker != "Kafka" || res.DrainRate <= 0 || res.LatencyCount != 100 {
		t.Errorf("implausible result %+v", res)
	}
	if !strings.Contains(out.String(), "of 3 partitions") || strings.Contains(out.String()+res.Summary(c), "kfake") {
		t.Errorf("the report misnames the topics or the broker:\n%s%s", out.String(), res.Summary(c))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if names := topics.Names(); len(names) > 0 {
		t.Errorf("the run left topics behind: %v", names)
	}
}

// A run whose relays stream with --source pgcdc leaves no replication slot
// behind (an inactive slot keeps every WAL segment from then on, and the
// server's few slots ran out after a handful of runs).
func TestRunWithPgcdcRelaysDropsItsSlot(t *testing.T) {
	bin := buildOutbox(t)
	url := teststores.URL(t, "postgres")
	db, _, err := wire.SQLDB(url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	slots := func() (n int) {
		if err := db.QueryRow("SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'outbox_outbox_bench_%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := slots()
	var out strings.Builder
	c := bench.Config{
		DBURL: url, BrokerURL: testnats.Shared(t), Events: 500, Out: &out, Relays: 1, DrainOnly: true,
		RelayArgs:    []string{"--source", "pgcdc"},
		RelayCommand: func(ctx context.Context, args []string) *exec.Cmd { return exec.CommandContext(ctx, bin, args...) },
		OpenStore:    wire.OpenStore, SQLDB: wire.SQLDB,
	}
	if _, err := bench.Run(context.Background(), c); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if after := slots(); after > before {
		t.Errorf("the run left %d replication slots behind", after-before)
	}
}
