package cli

import (
	"strings"
	"testing"

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
