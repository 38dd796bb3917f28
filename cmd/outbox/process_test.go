package main_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/testkit/teststores"
)

var binary string // the outbox command, built once by TestMain

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outbox-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "outbox")
	build := exec.Command("go", "build", "-race", "-o", binary, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the outbox command:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one running `outbox relay`.
type proc struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan error
	// up is closed once the relay logged that it started: it handles
	// SIGTERM from then on. Before, a SIGTERM ends the process as the
	// signal's default does (it holds nothing yet): startup, package
	// initialization of an 80 MB binary built with -race included, took
	// up to 0.8 s here, and CI once stopped a relay restarted so late
	// that the others had drained everything meanwhile.
	up chan struct{}
}

func startRelay(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{stderr: &bytes.Buffer{}, done: make(chan error, 1), up: make(chan struct{})}
	// info, whatever the test asked (the last --log-level wins): the
	// "started" line is how stop knows the relay handles SIGTERM
	args = append(slices.Clone(args), "--log-level", "info")
	p.cmd = exec.Command(binary, append([]string{"relay"}, args...)...)
	p.cmd.Stderr = &lockedWriter{w: p.stderr, up: p.up}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	// Cleanups run last first: this one, after the relay is gone (its
	// stderr complete), shows what each relay said when the test failed.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay %d (%s) stderr:\n%s", p.cmd.Process.Pid, p.cmd.ProcessState, p.stderr)
		}
	})
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		err := <-p.done
		p.done <- err
	})
	return p
}

type lockedWriter struct {
	mu   sync.Mutex
	w    *bytes.Buffer
	up   chan struct{} // closed at the relay's "started" line
	seen bool
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.w.Write(b)
	if !l.seen && bytes.Contains(l.w.Bytes(), []byte("outbox relay: started")) {
		l.seen = true
		close(l.up)
	}
	return n, err
}

// stop sends SIGTERM and returns how long the graceful exit took.
func (p *proc) stop(t *testing.T) time.Duration {
	t.Helper()
	select {
	case <-p.up:
	case err := <-p.done:
		p.done <- err
	case <-time.After(10 * time.Second):
	}
	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Errorf("relay exited with %v after SIGTERM; stderr:\n%s", err, p.stderr)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("relay did not exit within 15s of SIGTERM")
	}
	return time.Since(start)
}

func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	err := <-p.done
	p.done <- err
}

// keyedWorkload enqueues n events over `keys` keys; each payload is
// "key#seq" so order can be checked from the stream alone.
func keyedWorkload(t *testing.T, st driver.Store, topic string, n, keys int) []outbox.Message {
	t.Helper()
	seq := map[string]int{}
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		key := fmt.Sprintf("agg-%d", i%keys)
		seq[key]++
		msgs[i] = outbox.Message{Topic: topic, Key: key, Type: "Bumped", Payload: fmt.Appendf(nil, "%s#%d", key, seq[key])}
	}
	for i := 0; i < n; i += 500 {
		if err := st.Enqueue(context.Background(), msgs[i:min(i+500, n)]...); err != nil {
			t.Fatal(err)
		}
	}
	return msgs
}

// checkStream asserts that the stream holds every message, and that the
// first occurrence of each key's events is in sequence order.
func checkStream(t *testing.T, s *testnats.Stream, msgs []outbox.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got, err := s.All(ctx)
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
		key, n, _ := strings.Cut(p, "#")
		var seq int
		fmt.Sscan(n, &seq)
		if seq != next[key]+1 {
			t.Errorf("key %s: event #%d delivered first after #%d: order broken", key, seq, next[key])
		}
		next[key] = seq
	}
	lost := 0
	for _, m := range msgs {
		if !seen[string(m.Payload)] {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d events never reached the stream", lost, len(msgs))
	}
	t.Logf("stream holds %d messages for %d events (JetStream dedups re-publishes by Nats-Msg-Id)", len(got), len(msgs))
}

func waitPending0(t *testing.T, st driver.Store, d time.Duration) {
	t.Helper()
	if !drained(st, d) {
		t.Fatalf("outbox not drained after %s: %s", d, pendingReport(st))
	}
}

// drained waits up to d for nothing to be pending.
func drained(st driver.Store, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if s, err := st.Stats(context.Background()); err == nil && s.Pending() == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pendingReport is the outbox's stats and the first DEAD events' errors.
func pendingReport(st driver.Store) string {
	s, err := st.Stats(context.Background())
	why := fmt.Sprintf("%+v %v", s, err)
	if dead, _ := st.ListDead(context.Background(), store.DeadQuery{Limit: 3}); len(dead) > 0 {
		why += "; the first DEAD events' errors:"
		for _, r := range dead {
			why += fmt.Sprintf("\n  %d: %s", r.ID, r.LastError)
		}
	}
	return why
}

// waitRelaysDrained is waitPending0 for a test of relay processes: on
// failure it also shows where the in-flight events and the shards are (on
// MariaDB), and has each relay print its goroutines (SIGQUIT) to its
// stderr, which startRelay logs.
func waitRelaysDrained(t *testing.T, o teststores.Opened, kind string, d time.Duration, relays []*proc) {
	t.Helper()
	if drained(o.Store, d) {
		return
	}
	why := pendingReport(o.Store)
	if kind == "mysql" {
		why += dumpRows(o.DB, "in flight by shard and owner", "SELECT shard, lease_owner, COUNT(*), MIN(id), MAX(lease_until) FROM "+o.Opts.Table+" WHERE status = 'SENDING' GROUP BY shard, lease_owner ORDER BY shard")
		why += dumpRows(o.DB, "shards by owner", "SELECT owner, COUNT(*), MIN(shard), MAX(shard), MAX(epoch) FROM "+o.Opts.Table+"_shards GROUP BY owner")
		why += dumpRows(o.DB, "relays", "SELECT owner, lease_until, UNIX_TIMESTAMP() * 1000000 + MICROSECOND(NOW(6)) AS now FROM "+o.Opts.Table+"_relays")
	}
	for _, r := range relays {
		_ = r.cmd.Process.Signal(syscall.SIGQUIT)
		err := <-r.done
		r.done <- err
	}
	t.Fatalf("outbox not drained after %s: %s", d, why)
}

// dumpRows renders a query's rows, one a line, for a failure message.
func dumpRows(db *sql.DB, title, query string) string {
	rows, err := db.Query(query)
	if err != nil {
		return fmt.Sprintf("\n%s: %v", title, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s: %v", title, cols)
	for rows.Next() {
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return b.String() + "\n  " + err.Error()
		}
		b.WriteString("\n ")
		for _, v := range vals {
			b.WriteString(" " + string(v))
		}
	}
	return b.String()
}

func relayArgs(o teststores.Opened, brokerURL string) []string {
	return []string{"--db", o.URL, "--table", o.Opts.Table, "--broker", brokerURL,
		"--lease", "2s", "--batch", "50", "--poll", "50ms", "--backoff", "20ms", "--backoff-max", "500ms", "--log-level", "warn"}
}

// Three relay processes share the work; one is SIGKILLed mid-stream twice
// and restarted. Nothing may be lost and per-key order must hold.
func TestThreeRelaysOneKilledTwice(t *testing.T) {
	for _, kind := range teststores.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			o := teststores.Open(t, kind, store.Options{})
			natsURL := testnats.Shared(t)
			s := testnats.NewStream(t, natsURL)
			msgs := keyedWorkload(t, o.Store, s.Topic("orders"), 3000, 40)
			args := append(relayArgs(o, natsURL), "--log-level", "info")
			relays := []*proc{startRelay(t, args...), startRelay(t, args...), startRelay(t, args...)}
			ctx := context.Background()
			for _, at := range []uint64{600, 1800} {
				deadline := time.Now().Add(60 * time.Second)
				for {
					n, _ := s.Count(ctx)
					if n >= at {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("stream stuck below %d messages; relay stderr:\n%s", at, relays[0].stderr)
					}
					time.Sleep(5 * time.Millisecond)
				}
				relays[0].kill()
				relays[0] = startRelay(t, args...)
			}
			waitRelaysDrained(t, o, kind, 90*time.Second, relays)
			for _, r := range relays {
				if d := r.stop(t); d > 10*time.Second {
					t.Errorf("graceful stop took %s, promised ≤ 10s", d)
				}
			}
			checkStream(t, s, msgs)
		})
	}
}

// The broker disappears for 5 s mid-stream and comes back on the same port:
// delivery resumes by itself and nothing is lost.
func TestBrokerGoneForFiveSeconds(t *testing.T) {
	o := teststores.Open(t, "postgres", store.Options{})
	srv := testnats.Start(t)
	s := testnats.NewStream(t, srv.URL())
	msgs := keyedWorkload(t, o.Store, s.Topic("orders"), 2000, 20)
	r := startRelay(t, relayArgs(o, srv.URL())...)
	ctx := context.Background()
	for n, _ := s.Count(ctx); n < 300; n, _ = s.Count(ctx) {
		time.Sleep(5 * time.Millisecond)
	}
	srv.Stop()
	time.Sleep(5 * time.Second)
	srv.Restart(t)
	waitPending0(t, o.Store, 90*time.Second)
	if st, _ := o.Store.Stats(ctx); st.Dead != 0 {
		t.Errorf("%d events went DEAD during a 5 s outage", st.Dead)
	}
	r.stop(t)
	checkStream(t, s, msgs)
}

// A poison event (its subject has no stream: permanently unroutable) goes
// DEAD, the other keys keep flowing, and `outbox dead retry` delivers it
// once the cause is fixed.
func TestPoisonEventAndDeadRetry(t *testing.T) {
	o := teststores.Open(t, "postgres", store.Options{})
	natsURL := testnats.Shared(t)
	s := testnats.NewStream(t, natsURL)
	ctx := context.Background()
	good := keyedWorkload(t, o.Store, s.Topic("orders"), 200, 10)
	orphan := "orphan" + s.Subject + ".x"
	if err := o.Store.Enqueue(ctx, outbox.Message{Topic: orphan, Key: "agg-0", Type: "Poison", Payload: []byte("poison")}); err != nil {
		t.Fatal(err)
	}
	r := startRelay(t, relayArgs(o, natsURL)...)
	waitFor := func(what string, cond func() bool) {
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; relay stderr:\n%s", what, r.stderr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("the good events and one dead", func() bool {
		st, _ := o.Store.Stats(ctx)
		n, _ := s.Count(ctx)
		return st.Dead == 1 && n == uint64(len(good))
	})
	out, err := exec.Command(binary, "dead", "list", "--db", o.URL, "--table", o.Opts.Table).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "no JetStream stream captures subject") {
		t.Fatalf("dead list: %v\n%s", err, out)
	}
	// Fix the cause: a stream for the orphan subject.
	orphanStream := testnats.NewStream(t, natsURL)
	fixed := orphanStream.Topic("x")
	if _, err := o.DB.ExecContext(ctx, "UPDATE "+o.Opts.Table+" SET topic = $1 WHERE status = 'DEAD'", fixed); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(binary, "dead", "retry", "--all", "--db", o.URL, "--table", o.Opts.Table).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "requeued 1") {
		t.Fatalf("dead retry: %v\n%s", err, out)
	}
	waitFor("the requeued event", func() bool { n, _ := orphanStream.Count(ctx); return n == 1 })
	waitPending0(t, o.Store, 30*time.Second)
	r.stop(t)
	checkStream(t, s, good)
}

// The demo on the embedded default, as a newcomer runs it: the summary line
// and exit 0, with no database or broker configured.
func TestDemo(t *testing.T) {
	cmd := exec.Command(binary, "demo", "--orders", "150")
	cmd.Env = append(os.Environ(), "OUTBOX_DB=", "OUTBOX_BROKER=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`demo: 150 events committed, 150 delivered, 0 lost, 0 phantom, \d+ duplicates absorbed`).Match(out) {
		t.Errorf("no summary line in:\n%s", out)
	}
}

// What the process writes on stderr, not only what Main returns: a
// library's own log line (go-redis prints its pool's dial failures on
// its own) would come before the command's one line.
func TestErrorsAreOneLineOnTheProcessStderr(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"broker", "setup", "--broker", "redis://:s3cret@127.0.0.1:1/0"}, 1, "outbox broker: redisbroker: connect to redis://:xxxxx@127.0.0.1:1/0: "},
		{[]string{"status", "--db", "postgres://u:s3cret@127.0.0.1:1/test"}, 1, "outbox status: pgstore: cannot reach 127.0.0.1:1: user=u database=test: "},
		{[]string{"status", "--db", "postgres://u:s3cret@127.0.0.1:1/test?sslmode=bogus"}, 2, "outbox status: pgstore: bad database URL: "},
	} {
		var stderr bytes.Buffer
		cmd := exec.Command(binary, c.args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != c.code || strings.Count(stderr.String(), "\n") != 1 || !strings.HasPrefix(stderr.String(), c.want) || strings.Contains(stderr.String(), "s3cret") {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and one line starting %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}
