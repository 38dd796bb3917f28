package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/outbox-go/outbox/internal/bench"
	"github.com/outbox-go/outbox/internal/wire"
)

func runBench(ctx context.Context, e env, args []string) error {
	f := newFlags(e, "bench", "bench --db URL --broker nats://… [--events 100000] [--rate 1000] [--duration 10s]")
	brokerURL := f.String("broker", os.Getenv("OUTBOX_BROKER"), "broker URL (or OUTBOX_BROKER); nats:// for now")
	var c bench.Config
	f.IntVar(&c.Events, "events", 100_000, "backlog size for the drain measurement")
	f.IntVar(&c.Batch, "batch", 1000, "relay batch size (and raw SQL batch size)")
	f.IntVar(&c.Workers, "workers", 3, "relay workers")
	f.IntVar(&c.Rate, "rate", 1000, "events/s for the latency measurement")
	f.DurationVar(&c.Duration, "duration", 10*time.Second, "length of the latency measurement")
	f.IntVar(&c.Payload, "payload", 200, "payload size in bytes")
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
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.Run(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, res.Summary(c))
	return nil
}
