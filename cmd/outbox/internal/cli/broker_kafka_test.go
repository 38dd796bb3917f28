package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// broker setup on kafka:// creates the missing topics with the partitions
// asked for, says so, and leaves existing ones alone the second time
// (against kfake on a real port).
func TestBrokerSetupKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	url := "kafka://" + strings.Join(c.ListenAddrs(), ",")
	code, out, stderr := runCLI("broker", "setup", "--broker", url, "--topics", "orders, payments", "--partitions", "3", "--replication", "1")
	if code != exitOK || !strings.Contains(out, "created topics orders, payments on "+url) {
		t.Fatalf("first setup: exit %d %q %q", code, out, stderr)
	}
	code, out, stderr = runCLI("broker", "setup", "--broker", url, "--topics", "orders,refunds")
	if code != exitOK || !strings.Contains(out, "created topics refunds") || !strings.Contains(out, "topics orders on "+url+" exist already") {
		t.Fatalf("second setup: exit %d %q %q", code, out, stderr)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := kadm.NewClient(cl).ListTopics(ctx, "orders", "payments", "refunds")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(td["orders"].Partitions); n != 3 {
		t.Errorf("orders has %d partitions, want 3", n)
	}
	if _, ok := td["refunds"]; !ok {
		t.Errorf("refunds was not created: %v", td.Names())
	}
	for _, bad := range [][]string{
		{"--broker", url},
		{"--broker", url, "--topics", "a/b"},
		{"--broker", url, "--topics", "a", "--partitions", "0"},
		{"--broker", "kafka://", "--topics", "a"},
		{"--broker", "kafka://h:1?nope=1", "--topics", "a"},
	} {
		code, _, stderr := runCLI(append([]string{"broker", "setup"}, bad...)...)
		if code == exitOK || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("setup %v: exit %d, stderr %q; want one line and a failure", bad, code, stderr)
		}
	}
}
