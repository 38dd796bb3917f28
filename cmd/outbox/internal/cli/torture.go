package cli

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-go/outbox/cmd/outbox/internal/torture"
	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
)

// runTorture is the soak: the torture package's workload, relay processes
// (this executable's `relay`) and a seeded fault schedule for as long as
// asked, then the checker's summary line. It fails when any check fails.
func runTorture(ctx context.Context, e env, args []string) error {
	f := newFlags(e, "torture", "torture --db URL [--broker nats://…] [--duration 30m] [--seed N] [flags]")
	brokerURL := f.String("broker", "", "NATS URL (nats://host:4222); empty: an embedded NATS server, which the broker-restart fault restarts")
	var c torture.Config
	f.durationFlag(&c.Duration, "duration", 2*time.Minute, 10*time.Second, "how long the writers write; faults until 4 s before the end")
	f.Uint64Var(&c.Seed, "seed", 0, "seed of the fault schedule and the workload (0: random; printed in the summary)")
	f.intFlag(&c.Relays, "relays", 3, 1, noMax, "relay processes")
	f.intFlag(&c.Writers, "writers", 3, 1, noMax, "concurrent writers")
	f.intFlag(&c.Keys, "keys", 16, 1, noMax, "aggregates (event keys)")
	f.durationFlag(&c.Lease, "lease", 2*time.Second, 100*time.Millisecond, "the relays' --lease")
	faults := f.String("faults", "", "comma-separated faults to draw from (default: every one that applies): "+strings.Join(kindNames(), ","))
	f.BoolVar(&c.PGRestart, "pg-restart", false, "also restart the PostgreSQL cluster (pg_ctlcluster; disrupts every other user of the server)")
	f.StringVar(&c.HistoryDir, "history", "", "directory for the JSON history, written when a check fails (default: the temp directory)")
	f.BoolVar(&c.AlwaysWriteHistory, "history-always", false, "write the JSON history for a passing run too")
	f.BoolVar(&c.Keep, "keep", false, "leave the run's tables in the database")
	quiet := f.Bool("quiet", false, "print only the summary line")
	if err := f.parse(e, args); err != nil {
		return err
	}
	if len(f.posArgs()) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", wire.ErrUsage, f.posArgs()[0])
	}
	if err := checkBrokerURL(*brokerURL, false); err != nil {
		return err
	}
	if err := natsOnly("torture", *brokerURL); err != nil {
		return err
	}
	if f.db == "" {
		return fmt.Errorf("%w: torture needs --db (it creates and drops its own tables there)", wire.ErrUsage)
	}
	if *faults != "" {
		kinds, err := torture.ParseKinds(*faults)
		if err != nil {
			return fmt.Errorf("%w: --faults: %v", wire.ErrUsage, err)
		}
		c.Faults, c.Repeat = kinds, true
	}
	c.DB, c.Broker, c.Soak = f.db, *brokerURL, true
	if !*quiet {
		c.Progress = e.stdout
	}
	// The MySQL driver logs every connection the proxies reset.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := torture.Run(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, res.Summary)
	if !res.Passed() {
		return fmt.Errorf("FAILED (seed %d): %s; JSON history: %s; replay the schedule with --seed %d", res.Seed, strings.Join(res.Failures, "; "), res.HistoryFile, res.Seed)
	}
	if res.HistoryFile != "" {
		fmt.Fprintf(e.stdout, "torture: JSON history in %s\n", res.HistoryFile)
	}
	return nil
}

func kindNames() []string {
	out := make([]string, len(torture.AllKinds))
	for i, k := range torture.AllKinds {
		out[i] = string(k)
	}
	return out
}
