package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// outbox relay --dashboard-addr serves the dashboard of the running relay;
// the token from --dashboard-token-file enables actions and is never
// printed.
func TestRelayServesDashboard(t *testing.T) {
	natsURL := testnats.Shared(t)
	o := teststores.Open(t, "sqlite", store.Options{})
	addr := freeAddr(t)
	const token = "0123456789abcdef-dashboard-token"
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, token+"\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int)
	var stderr bytes.Buffer
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return stderr.Write(p) })
	go func() {
		done <- Main(ctx, []string{"relay", "--db", o.URL, "--table", o.Opts.Table, "--broker", natsURL,
			"--dashboard-addr", addr, "--dashboard-token-file", tokenFile}, &bytes.Buffer{}, w)
	}()
	do := func(method, path, tok string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+addr+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, _ := do("GET", "/", ""); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("the dashboard never answered: %s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := do("GET", "/api/overview", ""); code != 200 || !strings.Contains(body, `"actions":true`) || !strings.Contains(body, `"owner":`) {
		t.Errorf("overview: %d %s", code, body)
	}
	if code, _ := do("POST", "/api/dead/1/retry", ""); code != 401 {
		t.Errorf("retry without the token: %d; want 401", code)
	}
	if code, body := do("POST", "/api/dead/999999/retry", token); code != 404 {
		t.Errorf("retry of an unknown event with the token: %d %s; want 404", code, body)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("relay exit %d", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(stderr.String(), "dashboard at http://"+addr+"/") || strings.Contains(stderr.String(), token) {
		t.Errorf("the log does not give the dashboard's URL, or shows the token:\n%s", stderr.String())
	}
}

// Bad dashboard flags get one line naming the flag.
func TestRelayDashboardFlags(t *testing.T) {
	o := teststores.Open(t, "sqlite", store.Options{})
	dir := t.TempDir()
	empty, short := filepath.Join(dir, "empty"), filepath.Join(dir, "short")
	writeFile(t, empty, "\n")
	writeFile(t, short, "abc")
	relay := func(extra ...string) []string {
		return append([]string{"relay", "--db", o.URL, "--table", o.Opts.Table, "--broker", "nats://127.0.0.1:1"}, extra...)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{relay("--dashboard-addr", "8080"), "--dashboard-addr"},
		{relay("--dashboard-token-file", short), "add --dashboard-addr"},
		{relay("--dashboard-addr", ":0", "--dashboard-token-file", empty), "is empty"},
		{relay("--dashboard-addr", ":0", "--dashboard-token-file", short), "at least 16"},
		{relay("--dashboard-addr", ":0", "--dashboard-token-file", filepath.Join(dir, "none")), "--dashboard-token-file"},
		{relay("--dashboard-addr", "127.0.0.1:9464", "--metrics-addr", ":9464"), "different ports"},
		{relay("--dashboard-host", "outbox.internal"), "add --dashboard-addr"},
		{relay("--keep-sent", "0.5ns"), "below a nanosecond"},
		{relay("--keep-sent", "500ms"), "--keep-sent 500ms: keep sent events at least 1s"},
		{relay("--dashboard-addr", ":0", "--dashboard-host", "http://outbox.internal"), "--dashboard-host"},
	} {
		code, _, stderr := runCLI(c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d %q; want 2 and one line saying %q", c.args[len(c.args)-2:], code, stderr, c.want)
		}
	}
	// the token from the environment follows the token file's rules
	for _, tok := range []string{"short", "two words-and-more-than-16"} {
		t.Setenv("OUTBOX_DASHBOARD_TOKEN", tok)
		code, _, stderr := runCLI(relay("--dashboard-addr", ":0")...)
		if code != exitUsage || !strings.Contains(stderr, "OUTBOX_DASHBOARD_TOKEN") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("OUTBOX_DASHBOARD_TOKEN=%q: exit %d %q; want 2 and one line naming it", tok, code, stderr)
		}
	}
}

// A --config file holding a password, readable by its group or others,
// is warned about (with the fix); one readable by its owner alone, or
// without a secret, is not.
func TestConfigFileModeWarning(t *testing.T) {
	o := teststores.Open(t, "sqlite", store.Options{})
	dir := t.TempDir()
	for _, c := range []struct {
		mode    os.FileMode
		content string
		warn    bool
	}{
		{0o644, "broker = nats://u:s3cret@127.0.0.1:4222\n", true},
		{0o640, "broker = nats://u:s3cret@127.0.0.1:4222\n", true},
		{0o600, "broker = nats://u:s3cret@127.0.0.1:4222\n", false},
		{0o644, "broker = nats://127.0.0.1:4222\n", false},
	} {
		path := filepath.Join(dir, fmt.Sprintf("c%o-%v.conf", c.mode, c.warn))
		writeFile(t, path, c.content)
		if err := os.Chmod(path, c.mode); err != nil {
			t.Fatal(err)
		}
		// --dashboard-addr 8080 stops the relay after its flags are read
		_, _, stderr := runCLI("relay", "--db", o.URL, "--table", o.Opts.Table, "--config", path, "--dashboard-addr", "8080")
		if got := strings.Contains(stderr, "chmod 600 "+path); got != c.warn {
			t.Errorf("--config of mode %#o holding %q: warned %v (%q); want %v", c.mode, c.content, got, stderr, c.warn)
		}
	}
}
