package cli

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/telemetry"
)

// A relay started while its database or broker is unreachable does not
// exit (a process manager would restart it in a loop, and a rolling deploy
// during a database failover would take every relay down): it serves its
// metrics and health, answers /readyz 503 naming what it waits for, and
// retries with backoff until it gets through or is stopped. Only what the
// operator must fix is fatal: a usage error, a missing SQLite file or
// outbox table.

// Start-up retry delays: the first, and the cap (both before jitter).
const (
	startRetryFirst = 250 * time.Millisecond
	startRetryMax   = 10 * time.Second
)

// retrier runs one start-up connection with backoff and logs once per
// change of state: the first failure, a failure with another message, and
// the recovery; a retry that fails the same way is logged at debug level.
type retrier struct {
	what      string // "database" or "broker", as the messages say
	component string // telemetry.ComponentStore or ComponentBroker
	log       *slog.Logger
	state     *telemetry.State // nil when --metrics-addr is off
}

// run calls try until it succeeds, returns a fatal error, or ctx ends
// (then it returns ctx's error). try returns fatal=true for an error that
// retrying cannot fix.
func (r retrier) run(ctx context.Context, try func(ctx context.Context) (fatal bool, err error)) error {
	var (
		last     string
		since    time.Time
		attempts int
	)
	for {
		attempts++
		fatal, err := try(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			if r.state != nil {
				r.state.Connecting(r.component, nil)
			}
			if attempts > 1 {
				r.log.Info("outbox relay: "+r.what+" reachable", "after", time.Since(since).Round(time.Millisecond), "attempts", attempts)
			}
			return nil
		}
		if fatal {
			return err
		}
		if r.state != nil {
			r.state.Connecting(r.component, err)
		}
		wait := startDelay(attempts)
		switch msg := err.Error(); {
		case last == "":
			since = time.Now()
			r.log.Warn("outbox relay: "+r.what+" unreachable; retrying with backoff (not ready until then)", "error", msg)
		case msg != last:
			r.log.Warn("outbox relay: "+r.what+" still unreachable, now failing differently", "error", msg)
		default:
			r.log.Debug("outbox relay: "+r.what+" still unreachable", "attempts", attempts, "next_in", wait.Round(time.Millisecond))
		}
		last = err.Error()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// startDelay is the wait after the n-th failed attempt: doubling from
// startRetryFirst up to startRetryMax, less up to half at random, so that
// relays restarted together do not knock in step.
func startDelay(n int) time.Duration {
	d := startRetryFirst
	for i := 1; i < n && d < startRetryMax; i++ {
		d *= 2
	}
	d = min(d, startRetryMax)
	return d - time.Duration(rand.Int64N(int64(d/2)+1))
}

// openStoreRetrying opens the --db store and checks its table, retrying
// while the database cannot be reached.
func openStoreRetrying(ctx context.Context, f *flags, opts store.Options, r retrier) (driver.Store, error) {
	var st driver.Store
	err := r.run(ctx, func(ctx context.Context) (bool, error) {
		s, err := f.openStore(ctx, opts)
		if err != nil {
			return errors.Is(err, wire.ErrUsage), err
		}
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if err := checkTable(cctx, s); err != nil { // fail fast on a missing table
			s.Close()
			return errors.Is(err, store.ErrNotMigrated), f.storeErr(err)
		}
		st = s
		return false, nil
	})
	return st, err
}

// openBrokerRetrying connects to the --broker broker, retrying while it
// cannot be reached.
func openBrokerRetrying(ctx context.Context, raw string, r retrier) (broker.Broker, error) {
	var br broker.Broker
	err := r.run(ctx, func(ctx context.Context) (bool, error) {
		bctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		b, err := wire.OpenBroker(bctx, raw)
		if err != nil {
			return errors.Is(err, wire.ErrUsage), err
		}
		br = b
		return false, nil
	})
	return br, err
}

// checkTable fails with store.ErrNotMigrated when the outbox table is
// missing. It reads the bounded-cost Backlog where the store has one:
// Stats counts every row, seconds over a million-row backlog, which a
// relay restarted during an incident should not wait for.
func checkTable(ctx context.Context, st driver.Store) error {
	if br, ok := st.(store.BacklogReader); ok {
		_, err := br.Backlog(ctx)
		return err
	}
	_, err := st.Stats(ctx)
	return err
}
