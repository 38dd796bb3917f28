package bench

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store/driver"
)

// relayProcs are running `outbox relay` processes and their output.
type relayProcs struct {
	cmds []*exec.Cmd
	outs []*bytes.Buffer
}

// startRelays starts c.Relays `outbox relay` processes on table, publishing
// to brokerURL.
func startRelays(ctx context.Context, c Config, table, brokerURL string) (*relayProcs, error) {
	p := &relayProcs{}
	for i := 0; i < c.Relays; i++ {
		args := []string{"relay", "--table", table,
			"--batch", strconv.Itoa(c.Batch), "--workers", strconv.Itoa(c.Workers), "--log-level", "warn"}
		if c.KeepSent {
			args = append(args, "--keep-sent", "24h")
		}
		args = append(args, c.RelayArgs...)
		cmd := c.RelayCommand(ctx, args)
		// The URLs go in the environment, not the arguments: any local
		// user can read a process's arguments (ps), and they may hold a
		// password.
		cmd.Env = append(cmd.Environ(), "OUTBOX_DB="+c.DBURL, "OUTBOX_BROKER="+brokerURL)
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Start(); err != nil {
			p.stop()
			return nil, fmt.Errorf("bench: start relay process %d: %w", i+1, err)
		}
		p.cmds, p.outs = append(p.cmds, cmd), append(p.outs, &buf)
	}
	return p, nil
}

// stop sends SIGTERM to every process and waits for them; it returns the
// output of those that failed.
func (p *relayProcs) stop() error {
	var errs []string
	for _, c := range p.cmds {
		_ = c.Process.Signal(syscall.SIGTERM)
	}
	for i, c := range p.cmds {
		if err := c.Wait(); err != nil {
			errs = append(errs, fmt.Sprintf("relay process %d: %v: %s", i+1, err, p.outs[i].String()))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("bench: %v", errs)
	}
	return nil
}

// drainByProcesses lets c.Relays relay processes drain the backlog and
// returns events/s, timed from the first event the broker stored to the
// last (a process's start-up is not the relay's rate).
func drainByProcesses(ctx context.Context, st driver.Store, dest destination, c Config, table, phase string) (float64, Usage, error) {
	base, err := dest.stored(ctx) // the raw publish phase's messages
	if err != nil {
		return 0, Usage{}, err
	}
	procs, err := startRelays(ctx, c, table, dest.relayURL())
	if err != nil {
		return 0, Usage{}, err
	}
	usage := sampleProcesses(procs.pids())
	defer usage.halt()
	var delivered atomic.Int64
	stopProgress := progress(c.Out, phase, c.Events, delivered.Load)
	var first time.Time
	var firstN uint64
	deadline := time.Now().Add(10 * time.Minute)
	for {
		stored, err := dest.stored(ctx)
		if err != nil {
			stopProgress()
			procs.stop() //nolint:errcheck
			return 0, Usage{}, err
		}
		n := stored - base
		delivered.Store(int64(n))
		if n > 0 && first.IsZero() {
			first, firstN = time.Now(), n
		}
		if n >= uint64(c.Events) {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stopProgress()
			out := procs.stop()
			return 0, Usage{}, fmt.Errorf("bench: relay processes delivered %d of %d events within 10 minutes (%v)", n, c.Events, out)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(first)
	stopProgress()
	used := usage.finish()
	if err := procs.stop(); err != nil {
		return 0, Usage{}, err
	}
	if stats, err := st.Stats(ctx); err == nil && stats.Pending() > 0 {
		return 0, Usage{}, fmt.Errorf("bench: the broker holds every event but the table still has %d pending", stats.Pending())
	}
	return float64(uint64(c.Events)-firstN) / took.Seconds(), used, nil
}

// pids are the relay processes' ids.
func (p *relayProcs) pids() []int {
	ids := make([]int, len(p.cmds))
	for i, c := range p.cmds {
		ids[i] = c.Process.Pid
	}
	return ids
}

// latencyByProcesses measures commit → receipt by a consumer of the
// latency topic while c.Relays relay processes deliver a steady load.
func latencyByProcesses(ctx context.Context, dest destination, c Config, table string, produce func(context.Context, outbox.Message) error, res *Result) error {
	res.LatencyAt = "consumer receipt"
	var mu sync.Mutex
	got := map[string]time.Time{}
	stop, err := dest.receive(ctx, func(id string, at time.Time) {
		mu.Lock()
		if _, seen := got[id]; !seen {
			got[id] = at
		}
		mu.Unlock()
	})
	if err != nil {
		return err
	}
	defer stop()
	procs, err := startRelays(ctx, c, table, dest.relayURL())
	if err != nil {
		return err
	}
	time.Sleep(time.Second) // let the processes start and listen
	ids, committed, err := steadyLoad(ctx, c, dest.topic("latency"), produce, res)
	if err != nil {
		procs.stop() //nolint:errcheck
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= len(ids) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := procs.stop(); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return percentiles(c, ids, committed, got, res)
}

// plainSQLProducer enqueues as a producer in another language would: one
// INSERT of the table contract's columns per transaction, no notification.
// The event id is given so that the latency run can find the event.
func plainSQLProducer(db *sql.DB, dialect, table string) func(context.Context, outbox.Message) error {
	q := "INSERT INTO " + table + " (event_id, topic, event_key, event_type, payload) VALUES (?, ?, ?, ?, ?)"
	if dialect == "postgres" {
		q = "INSERT INTO " + table + " (event_id, topic, event_key, event_type, payload) VALUES ($1, $2, $3, $4, $5)"
	}
	return func(ctx context.Context, m outbox.Message) error {
		_, err := db.ExecContext(ctx, q, m.EventID, m.Topic, m.Key, m.Type, m.Payload)
		return err
	}
}
