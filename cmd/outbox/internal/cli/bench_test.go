package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox/testkit/teststores"
)

// `outbox bench --broker kfake` runs end to end with no Kafka installed:
// the in-process cluster is started and stopped by the command, and its
// report says so on every line with a Kafka figure.
func TestBenchKfake(t *testing.T) {
	code, out, stderr := runCLI("bench", "--db", teststores.URL(t, "postgres"), "--broker", "kfake", "--partitions", "2",
		"--events", "1000", "--keys", "10", "--rate", "100", "--duration", "1s", "--warmup", "0s")
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, stderr)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if (strings.Contains(line, "ev/s") || strings.Contains(line, "msgs/s")) && !strings.Contains(line, "(kfake, in-process)") {
			t.Errorf("a line with a Kafka figure does not say kfake: %s", line)
		}
	}
	if !strings.Contains(out, "library producer, Kafka (kfake, in-process) with 2 partitions: drain ") {
		t.Errorf("no summary line:\n%s", out)
	}
}

// `outbox bench --json FILE` writes the run's settings (passwords masked),
// figures and the machine's load; a path that cannot be created fails
// before the run, with one line and the usage exit code.
func TestBenchJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bench.json")
	code, out, stderr := runCLI("bench", "--db", teststores.URL(t, "postgres"), "--broker", "kfake", "--partitions", "2",
		"--events", "1000", "--keys", "10", "--rate", "100", "--duration", "1s", "--warmup", "0s", "--json", path)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Date      time.Time `json:"date"`
		GoVersion string    `json:"go_version"`
		LoadStart string    `json:"load_start"`
		Config    struct {
			Events int    `json:"events"`
			Broker string `json:"broker"`
		} `json:"config"`
		Result struct {
			DrainRate, NaiveRate float64
			LatencyCount         int
		} `json:"result"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	if rep.Date.IsZero() || rep.GoVersion == "" || rep.LoadStart == "" || rep.Config.Events != 1000 || rep.Config.Broker != "kfake" ||
		rep.Result.DrainRate <= 0 || rep.Result.NaiveRate <= 0 || rep.Result.LatencyCount != 100 {
		t.Errorf("implausible report: %s", b)
	}
	code, out, stderr = runCLI("bench", "--db", teststores.URL(t, "postgres"), "--broker", "kfake", "--json", filepath.Join(t.TempDir(), "no", "such", "dir.json"))
	if code != exitUsage || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, "--json") {
		t.Errorf("a --json path that cannot be created: exit %d, stderr %q (stdout %q); want exit %d and one line naming --json", code, stderr, out, exitUsage)
	}
}

// bench --enqueue takes no broker and refuses the drain's settings, and the
// enqueue settings need --enqueue; each mistake is one line and exit 2.
func TestBenchEnqueueRefusals(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "enqueue.db")
	for _, args := range [][]string{
		{"bench", "--enqueue", "--db", db, "--broker", "nats://127.0.0.1:4222"},
		{"bench", "--enqueue", "--db", db, "--writers", "8,0"},
		{"bench", "--enqueue", "--db", db, "--sweep", "keys=1,10"},
		{"bench", "--db", db, "--broker", "nats://127.0.0.1:4222", "--writers", "8"},
	} {
		code, out, stderr := runCLI(args...)
		if code != exitUsage || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("outbox %s: exit %d, stderr %q (stdout %q); want exit %d and one line", strings.Join(args, " "), code, stderr, out, exitUsage)
		}
	}
	code, out, stderr := runCLI("bench", "--enqueue", "--db", db, "--writers", "2", "--transactions", "20", "--rounds", "1")
	if code != exitOK || !strings.Contains(out, "| 2 | + outbox row, own statement (EnqueueTx) |") {
		t.Errorf("bench --enqueue on SQLite: exit %d\n%s\n%s", code, out, stderr)
	}
}
