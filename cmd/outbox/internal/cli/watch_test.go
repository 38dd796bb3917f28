package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// watch runs `outbox status --watch` with args until stop returns, then
// stops it as Ctrl-C would, and returns what it printed. stop can read
// what it has printed so far.
func watch(t *testing.T, stop func(printed func() string), args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb bytes.Buffer
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
	done := make(chan int)
	go func() { done <- Main(ctx, append([]string{"status", "--watch"}, args...), w, &errb) }()
	// The first look (exact counts included) may take a while on a
	// loaded machine: stop's clock starts once it is printed.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := out.Len()
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("status --watch printed nothing in 30s: %s", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop(func() string { mu.Lock(); defer mu.Unlock(); return out.String() })
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("status --watch: exit %d: %s", code, errb.String())
	}
	return out.String()
}

// A relay's pace, by hand: claims and acks n events every tick until none
// is left.
func drain(t *testing.T, st driver.Store, n int, every time.Duration) {
	t.Helper()
	for epoch := int64(1); ; epoch++ {
		c, err := teststores.TryClaim(context.Background(), st, driver.ClaimParams{Lease: driver.Lease{Owner: "w", Epoch: epoch}, Limit: n})
		if err != nil {
			t.Error(err)
			return
		}
		if len(c.Events) == 0 {
			return
		}
		ids := make([]int64, len(c.Events))
		for i, e := range c.Events {
			ids[i] = e.ID
		}
		if err := st.Ack(context.Background(), driver.AckParams{Lease: c.Lease, IDs: ids}); err != nil {
			t.Error(err)
			return
		}
		time.Sleep(every)
	}
}

// status --watch --json prints one object per line while a backlog drains:
// the net drain rate and an ETA while it shrinks, 0 pending at the end.
func TestStatusWatchJSON(t *testing.T) {
	for _, kind := range teststores.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			o := teststores.Open(t, kind, store.Options{})
			var msgs []outbox.Message
			for i := range 600 {
				msgs = append(msgs, outbox.Message{Topic: "orders.paid", Key: fmt.Sprintf("k%d", i), Type: "OrderPaid", Payload: []byte(`{}`)})
			}
			if err := o.Store.Enqueue(context.Background(), msgs...); err != nil {
				t.Fatal(err)
			}
			out := watch(t, func(printed func() string) {
				time.Sleep(300 * time.Millisecond)
				drain(t, o.Store, 25, 80*time.Millisecond)
				// until a look taken after the drain is printed: on a
				// loaded machine one look can take longer than a
				// fixed wait (CI's last line showed 50 pending)
				lines := strings.Count(printed(), "\n")
				for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
					if p := printed(); strings.Count(p, "\n") > lines+1 && strings.Contains(p[strings.LastIndex(strings.TrimSpace(p), "\n")+1:], `"pending":0,`) {
						break
					}
				}
				time.Sleep(300 * time.Millisecond)
			}, "--db", o.URL, "--table", o.Opts.Table, "--json", "--interval", "150ms")
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) < 5 {
				t.Fatalf("%d lines; want one per 150ms tick:\n%s", len(lines), out)
			}
			var sawETA bool
			var last watchJSON
			for i, l := range lines {
				var w watchJSON
				if err := json.Unmarshal([]byte(l), &w); err != nil {
					t.Fatalf("line %d is not a JSON object: %v\n%s", i+1, err, l)
				}
				if w.Table != o.Opts.Table || w.Exact == nil || w.Error != "" {
					t.Errorf("line %d: %s", i+1, l)
				}
				if w.ETASeconds != nil && w.Pending > 0 && w.NetDrainPerSecond != nil && *w.NetDrainPerSecond > 0 {
					sawETA = true
				}
				last = w
			}
			if lines0 := lines[0]; !strings.Contains(lines0, `"pending":600`) {
				t.Errorf("first line does not show the 600 pending: %s", lines0)
			}
			if !sawETA {
				t.Errorf("no line with a net drain rate and an ETA while draining:\n%s", out)
			}
			if last.Pending != 0 || last.ETASeconds == nil || *last.ETASeconds != 0 || last.DeadPerMinute == nil || *last.DeadPerMinute != 0 {
				t.Errorf("last line once drained: %+v", last)
			}
		})
	}
}

// Without --json, each frame is the whole view; off a terminal the frames
// follow each other with no escape codes.
func TestStatusWatchText(t *testing.T) {
	o := teststores.Open(t, "sqlite", store.Options{})
	if err := o.Store.Enqueue(context.Background(), outbox.Message{Topic: "t", Key: "k", Type: "T", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	out := watch(t, func(func() string) { time.Sleep(700 * time.Millisecond) }, "--db", o.URL, "--table", o.Opts.Table, "--interval", "200ms")
	if n := strings.Count(out, "outbox status --watch: table "+o.Opts.Table); n < 2 {
		t.Errorf("%d frames; want several:\n%s", n, out)
	}
	for _, want := range []string{"pending         1", "oldest pending", "dead            0", "blocked keys    0", "steady"} {
		if !strings.Contains(out, want) {
			t.Errorf("the view lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\033") {
		t.Errorf("escape codes off a terminal:\n%q", out)
	}
}

func TestStatusWatchFlags(t *testing.T) {
	o := teststores.Open(t, "sqlite", store.Options{})
	base := []string{"status", "--db", o.URL, "--table", o.Opts.Table}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{append(base, "--watch", "--check"), exitUsage, "drop --watch"},
		{append(base, "--interval", "1s"), exitUsage, "add --watch"},
		{append(base, "--watch", "--interval", "10ms"), exitUsage, "--interval"},
		{[]string{"status", "--db", o.URL, "--table", "no_such_table", "--watch"}, exitFail, "no_such_table does not exist"},
	} {
		code, _, stderr := runCLI(c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d %q; want %d saying %q", c.args[len(base)-1:], code, stderr, c.code, c.want)
		}
	}
}
