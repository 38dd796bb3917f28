package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/outbox-go/outbox/internal/bench"
	"github.com/outbox-go/outbox/internal/wire"
)

func runBench(ctx context.Context, e env, args []string) error {
	f := newFlags(e, "bench", "bench --db URL --broker nats://… [--events 100000] [--keys 5000] [--relays N] [--producer library|sql] [--rate 1000] [--duration 10s]")
	brokerURL := f.String("broker", os.Getenv("OUTBOX_BROKER"), "broker URL (or OUTBOX_BROKER); nats:// for now")
	var c bench.Config
	f.IntVar(&c.Events, "events", 100_000, "backlog size for the drain measurement")
	f.IntVar(&c.Batch, "batch", 1000, "relay batch size (and raw SQL batch size)")
	f.IntVar(&c.Workers, "workers", 3, "relay workers")
	f.IntVar(&c.Rate, "rate", 1000, "events/s for the latency measurement")
	f.DurationVar(&c.Duration, "duration", 10*time.Second, "length of the latency measurement")
	f.IntVar(&c.Payload, "payload", 200, "payload size in bytes")
	f.IntVar(&c.Keys, "keys", 5000, "distinct event keys in the backlog and the latency run (try 1, 10, 100, 1000, 100000)")
	f.IntVar(&c.Relays, "relays", 0, "run the drain and latency phases with this many separate `outbox relay` processes (0: one relay in this process)")
	relayArgs := f.String("relay-args", "", "extra flags for each relay process, space-separated (e.g. \"--poll 10ms\")")
	f.StringVar(&c.Producer, "producer", "library", "how the latency run's writers enqueue: library (Store.Enqueue) or sql (a plain INSERT, no notification)")
	cpuProfile := f.String("cpuprofile", "", "write a pprof CPU profile of the drain phase to this file")
	if err := f.parse(e, args); err != nil {
		return err
	}
	tuneGC()
	if *cpuProfile != "" {
		pf, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("%w: --cpuprofile: %v", wire.ErrUsage, err)
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
	res, err := bench.Run(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, res.Summary(c))
	return nil
}
