package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outbox-go/outbox/cmd/outbox/internal/bench"
	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
)

func runBench(ctx context.Context, e env, args []string) error {
	f := newFlags(e, "bench", "bench --db URL --broker nats://…|kafka://…|kfake [--events 100000] [--keys 5000] [--relays N] [--producer library|sql] [--rate 1000] [--duration 10s] [--partitions 16] [--json FILE]\n       outbox bench --enqueue --db URL [--writers 1,8,32] [--transactions 2000] [--rounds 5] [--json FILE]")
	brokerURL := f.String("broker", os.Getenv("OUTBOX_BROKER"), "broker (or OUTBOX_BROKER): "+bench.Brokers+"; kfake runs in this process, so its CPU is bench's and every Kafka figure says \"(kfake, in-process)\"")
	var c bench.Config
	f.intFlag(&c.Partitions, "partitions", bench.DefaultPartitions, 1, 1<<31-1, "partitions of the Kafka topics the run creates (and deletes after it); Kafka only")
	f.intFlag(&c.Events, "events", 100_000, 1, noMax, "backlog size for the drain measurement")
	f.intFlag(&c.Batch, "batch", 1000, 1, noMax, "relay batch size (and raw SQL batch size)")
	f.intFlag(&c.Workers, "workers", 3, 1, noMax, "relay workers")
	f.intFlag(&c.Rate, "rate", 1000, 1, noMax, "events/s for the latency measurement")
	f.durationFlag(&c.Duration, "duration", 10*time.Second, time.Second, "length of the latency measurement")
	f.durationFlag(&c.Warmup, "warmup", 2*time.Second, 0, "load at --rate before the measured --duration, reported apart (relay start-up, the first rebalance)")
	f.intFlag(&c.Payload, "payload", 200, 1, noMax, "payload size in bytes")
	f.intFlag(&c.Keys, "keys", 5000, 1, noMax, "distinct event keys in the backlog and the latency run (try 1, 10, 100, 1000, 100000)")
	f.intFlag(&c.Relays, "relays", 0, 0, noMax, "run the drain and latency phases with this many separate `outbox relay` processes (0: one relay in this process)")
	relayArgs := f.String("relay-args", "", "extra flags for each relay process, space-separated (e.g. \"--poll 10ms\")")
	f.StringVar(&c.Producer, "producer", "library", "how the latency run's writers enqueue: library (Store.Enqueue) or sql (a plain INSERT, no notification)")
	cpuProfile := f.String("cpuprofile", "", "write a pprof CPU profile of the drain phase to this file")
	f.intFlag(&c.History, "history", 0, 0, noMax, "archived events written to the archive table before the drain (a table after months with --keep-sent)")
	f.intFlag(&c.Dead, "dead", 0, 0, noMax, "DEAD rows written to the outbox table before the drain, on keys the drain does not use")
	f.BoolVar(&c.KeepSent, "keep-sent", false, "the relay archives what it delivers (relay processes get --keep-sent 24h)")
	sweepArg := f.String("sweep", "", "measure the drain only, once per value: keys=1,10,100,1000 or events=10000,100000,1000000")
	jsonFile := f.String("json", "", "also write the whole result (settings, figures, date, load averages, Go version, revision) as JSON to this file")
	chartFile := f.String("chart", "", "with --sweep: draw the drain against the swept setting as a PNG to this file")
	enqueue := f.Bool("enqueue", false, "measure what one outbox row adds to a business transaction instead (each form against the transaction alone; no broker)")
	writers := f.String("writers", "1,8,32", "with --enqueue: the concurrent producers, one run per value")
	var ec bench.EnqueueConfig
	f.intFlag(&ec.Transactions, "transactions", 2000, 1, noMax, "with --enqueue: transactions each form commits per round")
	f.intFlag(&ec.Rounds, "rounds", 5, 1, noMax, "with --enqueue: rounds in which the forms take turns")
	if err := f.parse(e, args); err != nil {
		return err
	}
	if len(f.posArgs()) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", wire.ErrUsage, f.posArgs()[0])
	}
	if *enqueue {
		ec.Payload = c.Payload
		return runEnqueueBench(ctx, e, f, ec, *writers, *jsonFile)
	}
	for _, name := range []string{"writers", "transactions", "rounds"} {
		if flagSet(f, name) {
			return fmt.Errorf("%w: --%s belongs to the enqueue scenario: add --enqueue", wire.ErrUsage, name)
		}
	}
	if *brokerURL == "" {
		return fmt.Errorf("%w: bench needs --broker (or OUTBOX_BROKER): %s", wire.ErrUsage, bench.Brokers)
	}
	scheme, _, _ := strings.Cut(*brokerURL, "://")
	kafka := strings.EqualFold(scheme, "kafka")
	switch {
	case strings.EqualFold(*brokerURL, "kfake"):
		*brokerURL, kafka = "kfake", true
	case strings.EqualFold(scheme, "nats") || kafka:
		if err := checkBrokerURL(*brokerURL, true); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: bench measures NATS JetStream and Kafka: --broker %s, not %s", wire.ErrUsage, bench.Brokers, wire.Mask(*brokerURL))
	}
	var sweep bench.Sweep
	if *sweepArg != "" {
		var err error
		if sweep, err = bench.ParseSweep(*sweepArg); err != nil {
			return fmt.Errorf("%w: %v", wire.ErrUsage, err)
		}
		if *jsonFile != "" {
			return fmt.Errorf("%w: --json writes a single run's result, not a --sweep", wire.ErrUsage)
		}
	} else if *chartFile != "" {
		return fmt.Errorf("%w: --chart draws a sweep: add --sweep keys=1,10,100,1000 (or events=…)", wire.ErrUsage)
	}
	if !kafka && flagSet(f, "partitions") {
		return fmt.Errorf("%w: --partitions applies to Kafka only (--broker kafka://… or kfake), not to %s", wire.ErrUsage, wire.Mask(*brokerURL))
	}
	tuneGC()
	if *cpuProfile != "" {
		pf, err := createOutput("cpuprofile", *cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		c.CPUProfile = pf
	}
	if f.db == "" {
		return fmt.Errorf("%w: bench needs --db (a scratch table is created and dropped)", wire.ErrUsage)
	}
	c.DBURL, c.BrokerURL, c.Out = f.db, *brokerURL, e.stdout
	c.OpenStore, c.SQLDB = wire.OpenStore, wire.SQLDB
	if *relayArgs != "" {
		c.RelayArgs = strings.Fields(*relayArgs)
	}
	if c.Relays > 0 {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench: cannot find this program to start relay processes: %w", err)
		}
		c.RelayCommand = func(ctx context.Context, args []string) *exec.Cmd { return exec.CommandContext(ctx, self, args...) }
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *sweepArg != "" {
		out, err := createOutput("chart", *chartFile)
		if err != nil {
			return err
		}
		if out != nil {
			defer out.Close()
		}
		points, err := bench.RunSweep(ctx, c, sweep)
		if out == nil || err != nil {
			return err
		}
		if err := finishOutput(out, "chart", func(w io.Writer) error { return bench.SweepChart(c, sweep, points).WritePNG(w) }); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "bench: chart written to %s\n", *chartFile)
		return nil
	}
	jf, err := createOutput("json", *jsonFile)
	if err != nil {
		return err
	}
	if jf != nil {
		defer jf.Close()
	}
	start, load := time.Now(), bench.LoadAvg()
	res, err := bench.Run(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, res.Summary(c))
	return finishOutput(jf, "json", bench.NewReport(c, res, start, load, wire.Mask).WriteJSON)
}

// runEnqueueBench runs `bench --enqueue`.
func runEnqueueBench(ctx context.Context, e env, f *flags, c bench.EnqueueConfig, writers, jsonFile string) error {
	for _, name := range []string{"broker", "sweep", "chart", "relays", "events", "keys"} {
		if flagSet(f, name) {
			return fmt.Errorf("%w: --%s does not apply to --enqueue (it measures producers' transactions only)", wire.ErrUsage, name)
		}
	}
	if f.db == "" {
		return fmt.Errorf("%w: bench --enqueue needs --db (a scratch table is created and dropped)", wire.ErrUsage)
	}
	for _, w := range strings.Split(writers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 1 || n > 1024 {
			return fmt.Errorf("%w: --writers %q: write whole numbers from 1 to 1024 separated by commas, e.g. 1,8,32", wire.ErrUsage, writers)
		}
		c.Writers = append(c.Writers, n)
	}
	c.DBURL, c.Out, c.OpenStore, c.SQLDB = f.db, e.stdout, wire.OpenStore, wire.SQLDB
	jf, err := createOutput("json", jsonFile)
	if err != nil {
		return err
	}
	if jf != nil {
		defer jf.Close()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	start, load := time.Now(), bench.LoadAvg()
	rows, err := bench.RunEnqueue(ctx, c)
	if err != nil {
		return err
	}
	return finishOutput(jf, "json", bench.NewEnqueueReport(c, rows, start, load, wire.Mask).WriteJSON)
}

// createOutput creates the file --flag names (nil when path is empty)
// before the run, so that a path that cannot be written fails at once, not
// after the run's minutes.
func createOutput(flag, path string) (*os.File, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%w: --%s: %v", wire.ErrUsage, flag, err)
	}
	return f, nil
}

// finishOutput writes f with write and closes it; nothing when f is nil.
func finishOutput(f *os.File, flag string, write func(io.Writer) error) error {
	if f == nil {
		return nil
	}
	err := write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--%s: %w", flag, err)
	}
	return nil
}

// flagSet reports whether the flag name was given, on the command line or
// in --config.
func flagSet(f *flags, name string) bool {
	set := false
	f.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}
