package main_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// freeLoopback returns a loopback address nothing listens on.
func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// The command speaks RocketMQ (broker/rocketmqbroker, a module of its
// own). No RocketMQ server runs here: a relay whose name server is down
// starts, says so once in its log, keeps retrying, answers /readyz 503
// naming the name server, and exits 0 on SIGTERM; a malformed rocketmq://
// URL exits 2 with one line before anything is opened.
func TestRocketMQRelayWaitsForItsNameServer(t *testing.T) {
	o := teststores.Open(t, "sqlite", store.Options{})
	nameServer, metrics := freeLoopback(t), freeLoopback(t)
	p := startRelay(t, "--db", o.URL, "--table", o.Opts.Table, "--broker", "rocketmq://"+nameServer+"?group=outbox-test", "--metrics-addr", metrics)

	var body string
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, b := httpGet("http://" + metrics + "/readyz")
		body = b
		if code == http.StatusServiceUnavailable && strings.Contains(body, "broker is unreachable") && strings.Contains(body, nameServer) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %q, want 503 naming the name server %s", code, body, nameServer)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("/readyz: %s", body)
	time.Sleep(1500 * time.Millisecond) // several retries
	select {
	case err := <-p.done:
		p.done <- err
		t.Fatalf("the relay exited (%v) instead of waiting for its name server", err)
	default:
	}
	p.stop(t)
	log := p.stderr.String()
	if n := strings.Count(log, "broker unreachable"); n != 1 || !strings.Contains(log, "no RocketMQ name server reachable ("+nameServer) {
		t.Errorf("%d log lines say the broker is unreachable, want 1 naming %s:\n%s", n, nameServer, log)
	}
	if strings.Contains(log, `time="`) { // logrus's text form, not the relay's
		t.Errorf("rocketmq-client-go printed on its own:\n%s", log)
	}

	for _, bad := range []string{
		"rocketmq://127.0.0.1:98760",
		"rocketmq://127.0.0.1",
		"rocketmq://ak:S3CRET@127.0.0.1:9876?colour=red",
		"rocketmq://" + nameServer + ",ak:S3CRET@" + nameServer,
	} {
		var stderr bytes.Buffer
		cmd := exec.Command(binary, "relay", "--db", o.URL, "--table", o.Opts.Table, "--broker", bad)
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || strings.Count(stderr.String(), "\n") != 1 || strings.Contains(stderr.String(), "S3CRET") {
			t.Errorf("--broker %s: %v, stderr %q; want exit 2 and one line without the secret", bad, err, stderr.String())
		}
	}
}

func httpGet(url string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
