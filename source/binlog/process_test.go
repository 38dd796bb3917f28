package binlog_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/internal/testnats"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveOutboxBinary()
	os.Exit(code)
}

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

// The active `outbox relay --source binlog` is SIGKILLed mid-stream while a
// producer commits transactions; the standby process takes the lease over
// and resumes from the saved position, and every event reaches JetStream,
// in order per key, and every row is deleted.
func TestSIGKILLMidStream(t *testing.T) {
	f := newFixture(t)
	natsURL := testnats.Shared(t)
	stream := testnats.NewStream(t, natsURL)
	topic := stream.Topic("orders")
	url := testenv.Require(t, testenv.MySQL)
	args := []string{"--db", url, "--broker", natsURL, "--source", "binlog", "--table", f.cfg.Table,
		"--lease", "2s", "--backoff", "20ms", "--backoff-max", "500ms", "--log-level", "debug"}
	a := startRelayProc(t, append(args, "--owner", "relay-a")...)
	waitFor(t, "relay a to stream", 120*time.Second, func() bool { return strings.Contains(a.stderr.String(), "outbox relay: started") })
	b := startRelayProc(t, append(args, "--owner", "relay-b")...)

	const n, keys = 2000, 20
	ctx := context.Background()
	produced := make(chan error, 1)
	go func() {
		seq := map[string]int{}
		for i := 0; i < n; i += 10 {
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				produced <- err
				return
			}
			for j := i; j < i+10; j++ {
				key := fmt.Sprintf("agg-%d", j%keys)
				seq[key]++
				if _, err := tx.ExecContext(ctx, "INSERT INTO `"+f.cfg.Table+"` (topic, event_key, event_type, payload) VALUES (?, ?, 'Bumped', ?)",
					topic, key, fmt.Appendf(nil, "%s#%d", key, seq[key])); err != nil {
					produced <- err
					return
				}
			}
			if err := tx.Commit(); err != nil {
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
