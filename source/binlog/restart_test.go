package binlog_test

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// RestartEnv, set to 1, lets TestStreamAcrossServerRestart restart the
// local MariaDB. .ci/run sets it in a step of its own, after the other
// tests, since a restart cuts every other test's connections.
const RestartEnv = "OUTBOX_TEST_RESTART_MARIADB"

// A server restart mid-stream (a clean shutdown, as a failover or an
// upgrade does it): the source reconnects, and every committed event is
// delivered in commit order, none rolled back, nothing lost.
func TestStreamAcrossServerRestart(t *testing.T) {
	if os.Getenv(RestartEnv) != "1" {
		t.Skipf("restarts the local MariaDB: run with %s=1 (.ci/run does, in a step of its own)", RestartEnv)
	}
	f := newFixture(t)
	src := f.start(t, f.cfg)
	c := collect(src)
	committed, rolled := produce(t, f, 80, func(i int) {
		if i != 40 {
			return
		}
		time.Sleep(300 * time.Millisecond) // let the stream catch up, then stop the server under it
		restartMariaDB(t)
	})
	c.until(t, 90*time.Second, committed...)
	c.inOrder(t, committed)
	for _, id := range rolled {
		if c.seen[id] > 0 {
			t.Fatalf("a rolled-back event (%s) was read", id)
		}
	}
	waitFor(t, "every delivered row deleted", 60*time.Second, func() bool { return f.count("true") == 0 })
}

// restartMariaDB stops the local server cleanly and starts it again the
// way scripts/services.sh does, then waits until it answers.
func restartMariaDB(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("mariadb-admin", "-uroot", "shutdown").CombinedOutput(); err != nil {
		t.Fatalf("mariadb-admin shutdown: %v %s", err, out)
	}
	if out, err := exec.Command("start-stop-daemon", "--start", "--oknodo", "--background", "--exec", "/usr/sbin/mariadbd").CombinedOutput(); err != nil {
		t.Fatalf("start mariadbd: %v %s", err, out)
	}
	waitFor(t, "MariaDB to answer after its restart", 60*time.Second, func() bool {
		return exec.Command("mariadb", "-uroot", "-e", "select 1").Run() == nil
	})
}
