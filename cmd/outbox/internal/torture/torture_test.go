package torture_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/outbox-go/outbox/cmd/outbox/internal/torture"
	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/testkit/teststores"
)

var binary string // the outbox command, built once by TestMain

func TestMain(m *testing.M) {
	if name := os.Getenv(variantEnv); name != "" {
		os.Exit(variantRelayMain(name, os.Args[1:]))
	}
	// The MySQL driver logs each connection the proxies reset; the run
	// counts those faults itself.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	dir, err := os.MkdirTemp("", "outbox-torture-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "outbox")
	// Without -race: the relays are many processes on a small machine, and
	// the relay's races are what cmd/outbox's process tests look for.
	build := exec.Command("go", "build", "-o", binary, "github.com/outbox-go/outbox/cmd/outbox")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the outbox command:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		// rocketmq-client-go (through wire) starts a cache's janitor when
		// its package is loaded, for the life of the process.
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/patrickmn/go-cache.(*janitor).Run")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// seed is OUTBOX_TORTURE_SEED when set (to replay a failure), else 0: a
// random one, printed in the summary.
func seed(t *testing.T) uint64 {
	s := os.Getenv("OUTBOX_TORTURE_SEED")
	if s == "" {
		return 0
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("OUTBOX_TORTURE_SEED=%q: %v", s, err)
	}
	return n
}

// logWriter sends progress lines to t.Log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// brokerURL is the broker of a cell: the machine's shared server, or ""
// for an embedded one.
func brokerURL(t *testing.T, c torture.Cell) string {
	if c.Embedded {
		return ""
	}
	switch c.Broker {
	case "nats":
		return testnats.Shared(t)
	}
	t.Fatalf("no test server for broker %q", c.Broker)
	return ""
}

// TestMatrix runs the short matrix: every cell must lose nothing, invent
// nothing, keep per-key order, apply each event once, and recover by itself.
func TestMatrix(t *testing.T) {
	t.Parallel()
	for _, cell := range torture.Matrix {
		t.Run(cell.Name(), func(t *testing.T) {
			t.Parallel()
			cfg := torture.Config{
				DB: teststores.URL(t, cell.Store), Broker: brokerURL(t, cell), BrokerKind: cell.Broker, Source: cell.Source,
				Faults: cell.Faults, Keys: cell.Keys, Seed: seed(t), Duration: 24 * time.Second, RelayBinary: binary, Progress: logWriter{t},
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			res, err := torture.Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(res.Summary)
			if !res.Passed() {
				t.Fatalf("%s\nfailures:\n  %s\nJSON history: %s\nreplay with OUTBOX_TORTURE_SEED=%d", res.Summary, strings.Join(res.Failures, "\n  "), res.HistoryFile, res.Seed)
			}
			if len(res.Faults) == 0 {
				t.Fatal("no fault was injected: the run tested nothing")
			}
		})
	}
}

// TestBrokenVariantsAreCaught runs each deliberately broken relay in the
// scenario that exposes it: the checker must report it broken.
func TestBrokenVariantsAreCaught(t *testing.T) {
	t.Parallel()
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			if v.pending != "" {
				t.Skipf("%s: pending: %s", v.bug, v.pending)
			}
			t.Parallel()
			broker := testnats.Shared(t)
			cfg := torture.Config{
				DB: teststores.URL(t, v.store), Broker: broker, Seed: seed(t), Duration: 10 * time.Second,
				RelayCommand: variantCommand(v.name), RecoverWithin: 5 * time.Second, Progress: logWriter{t},
				HistoryDir: t.TempDir(),
			}
			v.setup(&cfg)
			if last := cfg.Schedule; len(last) > 0 {
				cfg.Duration = max(cfg.Duration, last[len(last)-1].At+last[len(last)-1].For+3*time.Second)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			res, err := torture.Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(res.Summary)
			caught, figure := v.caught(res.Report)
			if !caught || res.Passed() {
				t.Fatalf("the checker did not report %q (%s) as broken: %s\n%s", v.name, v.bug, figure, res.Summary)
			}
			var hf struct {
				Failures []string        `json:"failures"`
				Report   torture.Report  `json:"report"`
				History  torture.History `json:"history"`
			}
			if b, err := os.ReadFile(res.HistoryFile); err != nil {
				t.Fatalf("a failed run must leave its JSON history: %v", err)
			} else if err := json.Unmarshal(b, &hf); err != nil || len(hf.Failures) == 0 || len(hf.Report.Anomalies) == 0 || len(hf.History.Ledger) == 0 {
				t.Fatalf("JSON history %s lacks the failures, anomalies or ledger (%v)", res.HistoryFile, err)
			}
			t.Logf("caught %s (%s): %s", v.name, v.bug, figure)
		})
	}
}
