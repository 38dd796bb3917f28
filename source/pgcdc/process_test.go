package pgcdc_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/internal/testnats"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type relayProc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan error
}

func startRelayProc(t *testing.T, args ...string) *relayProc {
	t.Helper()
	p := &relayProc{stderr: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(testenv.OutboxBinary(t), append([]string{"relay"}, args...)...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("relay %d stderr:\n%s", p.cmd.Process.Pid, p.stderr)
		}
	})
	return p
}

// The active `outbox relay --source pgcdc` is SIGKILLed mid-stream while a
// producer writes; the standby process takes over the lease and the slot,
// and every event reaches JetStream, in order per key.
func TestSIGKILLMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs outbox processes")
	}
	f := newFixture(t, false)
	natsURL := testnats.Shared(t)
	stream := testnats.NewStream(t, natsURL)
	topic := stream.Topic("orders")
	url := testenv.Require(t, testenv.Postgres)
	cfg := f.cfg.WithDefaults()
	args := []string{"--db", url, "--broker", natsURL, "--source", "pgcdc", "--table", f.cfg.Table, "--slot", cfg.Slot,
		"--lease", "2s", "--backoff", "20ms", "--backoff-max", "500ms", "--log-level", "debug"}
	a := startRelayProc(t, append(args, "--owner", "relay-a")...)
	waitFor(t, "relay a to stream", 60*time.Second, func() bool { return strings.Contains(a.stderr.String(), "outbox relay: started") })
	b := startRelayProc(t, append(args, "--owner", "relay-b")...)

	const n, keys = 3000, 20
	ctx := context.Background()
	produced := make(chan error, 1)
	go func() {
		seq := map[string]int{}
		for i := 0; i < n; i += 10 {
			tx, err := f.pool.Begin(ctx)
			if err != nil {
				produced <- err
				return
			}
			for j := i; j < i+10; j++ {
				key := fmt.Sprintf("agg-%d", j%keys)
				seq[key]++
				if _, err := tx.Exec(ctx, "INSERT INTO "+f.table()+" (topic, event_key, event_type, payload) VALUES ($1, $2, 'Bumped', $3)",
					topic, key, fmt.Appendf(nil, "%s#%d", key, seq[key])); err != nil {
					produced <- err
					return
				}
			}
			if err := tx.Commit(ctx); err != nil {
				produced <- err
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		produced <- nil
	}()
	waitFor(t, "a third of the events in the stream", 60*time.Second, func() bool {
		c, err := stream.Count(ctx)
		return err == nil && c >= n/3
	})
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
	a.done <- nil
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "relay b to take over", 60*time.Second, func() bool { return strings.Contains(b.stderr.String(), "outbox relay: started") })
	t.Cleanup(func() {
		if t.Failed() {
			c, _ := stream.Count(ctx)
			t.Logf("rows left: %d NEW, %d DEAD; the stream holds %d messages", f.count("status = 'NEW'"), f.count("status = 'DEAD'"), c)
		}
	})
	waitFor(t, "every event delivered and its row deleted", 120*time.Second, func() bool { return f.count("true") == 0 })
	got, err := stream.All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	next := map[string]int{}
	for _, m := range got {
		p := string(m.Data)
		if seen[p] {
			continue
		}
		seen[p] = true
		key, num, _ := strings.Cut(p, "#")
		var s int
		fmt.Sscan(num, &s)
		if s != next[key]+1 {
			t.Fatalf("key %s: #%d delivered first after #%d", key, s, next[key])
		}
		next[key] = s
	}
	if len(seen) != n {
		t.Fatalf("%d of %d events reached the stream", len(seen), n)
	}
	t.Logf("stream holds %d messages for %d events", len(got), n)
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
		b.done <- nil
	case <-time.After(15 * time.Second):
		t.Error("relay b did not stop within 15s of SIGTERM")
	}
}
