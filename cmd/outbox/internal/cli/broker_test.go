package cli

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// broker setup creates the stream, says so, is a no-op the second time and
// adds a missing subject the third.
func TestBrokerSetup(t *testing.T) {
	url := testnats.Shared(t)
	name := strings.ToUpper(teststores.UniqueTable("CLI_SETUP_"))
	prefix := strings.ToLower(name)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	steps := []struct{ subjects, want string }{
		{prefix, "created stream " + name + " on " + url + " capturing " + prefix},
		{prefix, "stream " + name + " on " + url + " already captures " + prefix},
		{prefix + "," + prefix + ".>", "now also captures " + prefix + ".>"},
	}
	for _, s := range steps {
		code, out, stderr := runCLI("broker", "setup", "--broker", url, "--stream", name, "--subjects", s.subjects)
		if code != exitOK || !strings.Contains(out, s.want) {
			t.Errorf("broker setup --subjects %s: exit %d %q %q; want %q", s.subjects, code, out, stderr, s.want)
		}
	}
	st, err := js.Stream(context.Background(), name)
	if err != nil || strings.Join(st.CachedInfo().Config.Subjects, ",") != prefix+","+prefix+".>" {
		t.Errorf("stream %s: %v %v", name, st, err)
	}
}

// The relay's start line shows every effective setting, the URLs masked.
func TestRelayLogsEffectiveSettings(t *testing.T) {
	natsURL := testnats.Shared(t)
	o := teststores.Open(t, "sqlite", store.Options{})
	brokerURL := strings.Replace(natsURL, "nats://", "nats://relay:s3cret@", 1)
	var mu sync.Mutex
	var stderr bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return stderr.Write(p) })
	read := func() string { mu.Lock(); defer mu.Unlock(); return stderr.String() }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- Main(ctx, []string{"relay", "--db", o.URL, "--table", o.Opts.Table, "--broker", brokerURL,
			"--batch", "7", "--workers", "2", "--lease", "1500ms", "--poll", "20ms", "--max-attempts", "4",
			"--publish-timeout", "3s", "--backoff", "10ms", "--backoff-max", "2s", "--keep-sent", "1h", "--dead-keys", "skip"}, &bytes.Buffer{}, w)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(read(), "outbox relay: started") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("relay exit %d: %s", code, read())
	}
	var started string
	for _, l := range strings.Split(read(), "\n") {
		if strings.Contains(l, "outbox relay: started") {
			started = l
		}
	}
	for _, want := range []string{"table=" + o.Opts.Table, "batch=7", "workers=2", "lease=1.5s", "poll=20ms", "max_attempts=4",
		"publish_timeout=3s", "backoff=10ms", "backoff_max=2s", "keep_sent=1h0m0s", "dead_keys=skip", "broker=nats://relay:"} {
		if !strings.Contains(started, want) {
			t.Errorf("start line lacks %s: %q", want, started)
		}
	}
	if strings.Contains(read(), "s3cret") {
		t.Errorf("the relay's log shows the broker password: %s", read())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// outbox relay --metrics-addr serves the metrics and health endpoints of
// the running relay.
func TestRelayServesMetricsAndHealth(t *testing.T) {
	natsURL := testnats.Shared(t)
	o := teststores.Open(t, "sqlite", store.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	var stderr bytes.Buffer
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return stderr.Write(p) })
	go func() {
		done <- Main(ctx, []string{"relay", "--db", o.URL, "--table", o.Opts.Table, "--broker", natsURL, "--metrics-addr", addr}, &bytes.Buffer{}, w)
	}()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// /healthz answers from the start; /readyz once the relay connected
	// to its database and broker and runs.
	deadline := time.Now().Add(20 * time.Second)
	for {
		hcode, _ := get("/healthz")
		if code, body := get("/readyz"); hcode == 200 && code == 200 && body == "ready\n" {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			code, body := get("/readyz")
			t.Fatalf("/healthz %d, /readyz %d %q after 20s: %s", hcode, code, body, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, body := get("/metrics")
	for _, want := range []string{"outbox_pending_events 0", "outbox_broker_up 1", "outbox_store_up 1", "go_goroutines"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %q", code, want)
		}
	}
	cancel()
	if code := <-done; code != exitOK {
		mu.Lock()
		t.Errorf("relay exit %d: %s", code, stderr.String())
	}
}

func TestBrokerSetupNothingForRedisAndWebhooks(t *testing.T) {
	url := testenv.Require(t, testenv.Redis)
	for _, b := range []string{url, "https://hooks.example/{topic}"} {
		var out, errb bytes.Buffer
		if code := Main(context.Background(), []string{"broker", "setup", "--broker", b}, &out, &errb); code != 0 || !strings.Contains(out.String(), "nothing to set up") {
			t.Errorf("broker setup --broker %s: exit %d, %q %q", b, code, out.String(), errb.String())
		}
	}
}

// RocketMQ topics are made with its admin tool: broker setup prints the
// mqadmin command for each topic, with the URL's name servers, changes
// nothing, and refuses a topic name the adapter would refuse.
func TestBrokerSetupRocketMQSaysWhatToCreate(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"broker", "setup", "--broker", "rocketmq://ak:S3CRET@127.0.0.1:9876,10.1.2.3:9876?group=g", "--topics", "orders, payments"}, &out, &errb)
	if code != exitOK || errb.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	for _, want := range []string{
		"nothing was changed",
		"mqadmin updateTopic -n '127.0.0.1:9876;10.1.2.3:9876' -c DefaultCluster -t orders\n",
		"mqadmin updateTopic -n '127.0.0.1:9876;10.1.2.3:9876' -c DefaultCluster -t payments\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "S3CRET") {
		t.Errorf("stdout shows the secret key:\n%s", out.String())
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--broker", "rocketmq://127.0.0.1:9876"}, "--topics is required"},
		{[]string{"--broker", "rocketmq://127.0.0.1:9876", "--topics", "orders;rm -rf"}, "not a legal RocketMQ topic name"},
		{[]string{"--broker", "rocketmq://ak:S3CRET@127.0.0.1", "--topics", "orders"}, "host:port"},
	} {
		out.Reset()
		errb.Reset()
		code := Main(context.Background(), append([]string{"broker", "setup"}, c.args...), &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), c.says) || strings.Count(errb.String(), "\n") != 1 || strings.Contains(errb.String(), "S3CRET") {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and one line saying %q", c.args, code, errb.String(), exitUsage, c.says)
		}
	}
}
