package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"text/tabwriter"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cli runs the command with args and returns its exit code.
func cli(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := Config{Out: stdout}
	var jsonPath string
	fs.StringVar(&c.DB, "db", "postgres://postgres@127.0.0.1:5432/test", "PostgreSQL URL (watermill-sql's table is created there for the run)")
	fs.StringVar(&c.Broker, "broker", "nats://127.0.0.1:4222", "NATS URL with JetStream (a stream is created there for the run)")
	fs.IntVar(&c.Events, "events", 100_000, "events pre-filled for the drain")
	fs.IntVar(&c.Rate, "rate", 1000, "events/s the producers commit during the latency run")
	fs.DurationVar(&c.Duration, "duration", 30*time.Second, "length of the latency run")
	fs.IntVar(&c.Batch, "batch", 1000, "watermill-sql queue schema SubscribeBatchSize")
	fs.DurationVar(&c.Poll, "poll", 10*time.Millisecond, "watermill-sql subscriber PollInterval")
	fs.IntVar(&c.Writers, "writers", 8, "concurrent producers of the latency run")
	fs.StringVar(&jsonPath, "json", "", "write the figures to this file as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "peers: unexpected arguments %q\n", fs.Args())
		return 2
	}
	res, err := run(ctx, c)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	printTable(stdout, res)
	if jsonPath != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err == nil {
			err = os.WriteFile(jsonPath, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "peers: write %s: %v\n", jsonPath, err)
			return 1
		}
	}
	return 0
}

func printTable(w io.Writer, r *Result) {
	fmt.Fprintf(w, "\n%s\n", r.Peer)
	for _, m := range sortedKeys(r.Versions) {
		fmt.Fprintf(w, "  %s %s\n", m, r.Versions[m])
	}
	for _, k := range sortedKeys(r.Settings) {
		fmt.Fprintf(w, "  %-17s %s\n", k, r.Settings[k])
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tevents\tev/s\ttime\tp50\tp95\tp99\tmax\t")
	fmt.Fprintf(tw, "drain\t%d\t%.0f\t%.2fs\t-\t-\t-\t-\t\n", r.DrainEvents, r.DrainRate, r.DrainSeconds)
	fmt.Fprintf(tw, "latency\t%d\t%.0f (target %d)\t%.0fs\t%s\t%s\t%s\t%s\t\n", r.LatencyReceived, r.LatencyAchieved, r.LatencyTargetRate, r.LatencySeconds,
		dur(r.p50), dur(r.p95), dur(r.p99), dur(r.max))
	_ = tw.Flush()
	fmt.Fprintf(w, "latency: %s\n", r.LatencyMeasuredAt)
}

func dur(d time.Duration) string {
	if d >= 10*time.Millisecond {
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(10 * time.Microsecond).String()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
