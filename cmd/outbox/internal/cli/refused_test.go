package cli

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-go/outbox/internal/testenv"
)

// A database or broker that answers and refuses the URL's login makes
// `outbox relay` exit 2 at once with one line naming the fix, for every
// server it speaks to; one that cannot be reached is still waited for
// (TestRelayWaitsForTheDatabase and its neighbours). The servers that need
// a password here are private ones on free ports, started for the test.
func TestRelayExitsOnRefusedLogin(t *testing.T) {
	pg := testenv.Require(t, testenv.Postgres)
	my := testenv.Require(t, testenv.MySQL)
	testenv.Require(t, testenv.NATS)
	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "refused.db")
	if code, _, stderr := runCLI("migrate", "--db", sqlite); code != exitOK {
		t.Fatalf("migrate: %d %s", code, stderr)
	}
	pgURL, err := url.Parse(pg)
	if err != nil {
		t.Fatal(err)
	}
	noRole, noDB := *pgURL, *pgURL
	noRole.User = url.User("outbox_no_such_role")
	noDB.Path = "/outbox_no_such_database"
	myURL, err := url.Parse(my)
	if err != nil {
		t.Fatal(err)
	}
	myURL.User = url.UserPassword(myURL.User.Username(), "outbox-wrong-password")

	natsPort := freePort(t)
	startServer(t, "nats-server", "-a", "127.0.0.1", "-p", natsPort, "--user", "relay", "--pass", "right")
	redisPort := freePort(t)
	startServer(t, "redis-server", "--bind", "127.0.0.1", "--port", redisPort, "--save", "", "--appendonly", "no", "--requirepass", "right")
	mqttPort := freePort(t)
	// mosquitto started as root reads its files as the user mosquitto:
	// t.TempDir's parent is private to root.
	dir, err := os.MkdirTemp("", "outbox-mqtt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	pwfile := filepath.Join(dir, "passwd")
	if out, err := exec.Command("mosquitto_passwd", "-b", "-c", pwfile, "relay", "right").CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_passwd: %v %s", err, out)
	}
	for _, p := range []string{dir, pwfile} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(dir, "mosquitto.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("listener %s 127.0.0.1\nallow_anonymous false\npassword_file %s\n", mqttPort, pwfile)), 0o644); err != nil {
		t.Fatal(err)
	}
	startServer(t, "mosquitto", "-c", conf)
	kafka, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("PLAIN", "relay", "right"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kafka.Close)
	// kfake drops the connection on a wrong password; a Kafka broker
	// answers SASL_AUTHENTICATION_FAILED (58), as this does.
	kafka.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kafka.KeepControl()
		resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		msg := "Authentication failed: Invalid username or password"
		resp.ErrorMessage = &msg
		return resp, nil, true
	})
	for _, p := range []string{natsPort, redisPort, mqttPort} {
		waitListening(t, "127.0.0.1:"+p)
	}

	for _, c := range []struct {
		name, db, broker, says string
	}{
		{"postgres unknown role", noRole.String(), "nats://127.0.0.1:4222", "check the user and password"},
		{"postgres unknown database", noDB.String(), "nats://127.0.0.1:4222", "does not exist"},
		{"mariadb wrong password", myURL.String(), "nats://127.0.0.1:4222", "Access denied"},
		{"nats wrong password", sqlite, "nats://relay:wrong@127.0.0.1:" + natsPort, "Authorization Violation"},
		{"redis wrong password", sqlite, "redis://:wrong@127.0.0.1:" + redisPort + "/0", "WRONGPASS"},
		{"mqtt wrong password", sqlite, "mqtt://relay:wrong@127.0.0.1:" + mqttPort, "check the user name and password"},
		{"kafka wrong password", sqlite, "kafka://relay:wrong@" + kafka.ListenAddrs()[0], "SASL_AUTHENTICATION_FAILED"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			t.Setenv("OUTBOX_DB", c.db)
			t.Setenv("OUTBOX_BROKER", c.broker)
			code, _, stderr := runCLI("relay", "--metrics-addr", "")
			took := time.Since(start)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			last := lines[len(lines)-1]
			if code != exitUsage || !strings.Contains(last, c.says) || took > 15*time.Second {
				t.Fatalf("exit %d after %v, last line %q; want exit %d at once saying %q\nstderr: %s", code, took.Round(time.Millisecond), last, exitUsage, c.says, stderr)
			}
			if strings.Contains(stderr, "wrong") && !strings.Contains(c.says, "wrong") {
				t.Errorf("the password shows: %s", stderr)
			}
		})
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

func startServer(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s said: %s", name, out.String())
		}
	})
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s (Debian package of the same name): %v", name, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

func waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
