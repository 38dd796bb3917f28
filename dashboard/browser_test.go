package dashboard_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testenv"
)

// chromium finds Debian's chromium (or OUTBOX_CHROMIUM). Missing, the test
// skips on a developer's machine and fails in CI, where .ci/run installs it.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("OUTBOX_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium is not installed: apt-get install -y chromium (or set OUTBOX_CHROMIUM to a Chrome binary)"
	if testenv.InCI() {
		t.Fatal(msg + "; .ci/run installs it before the tests")
	}
	t.Skip(msg)
	return ""
}

// browser starts a headless Chromium and returns a context for one tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1360, 1020),
		chromedp.UserDataDir(t.TempDir()),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	// The first Run starts the browser; it must not carry a deadline.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// step runs actions with a deadline, failing the test with what it waited
// for.
func step(t *testing.T, ctx context.Context, what string, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		// what the page showed, for the diagnosis
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		text, _ := chromedp.Run(lctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : "(no body)"`))
		t.Fatalf("browser: %s: %v\npage text:\n%s", what, err, text)
	}
}

// click clicks the first element matching the CSS selector sel, finding
// and clicking it in one evaluation, and waits until there is one. The
// dashboard redraws its tables several times a second, so a click given a
// node found in an earlier round trip can land on a node already replaced.
func click(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.click(); return true })()`, sel),
		chromedp.WithPollingInterval(50*time.Millisecond))
}

func evalString(t *testing.T, ctx context.Context, js string) string {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(sctx, chromedp.Evaluate[string](js))
	if err != nil {
		t.Fatalf("browser: evaluating %s: %v", js, err)
	}
	return s
}

// The end-to-end test: a real relay over a real store, a broker that
// refuses one event. In headless Chromium the operator sees the dead letter
// with its payload (markup shown as text, never run) and its error, is
// refused without the token, enters it, fixes the broker, clicks Retry and
// sees the event delivered. Then skips a second dead event, in two clicks.
// OUTBOX_SCREENSHOT=1 saves docs/dashboard.png.
func TestBrowserRetryDeadLetter(t *testing.T) {
	ctx := browser(t)
	// Small batches and a slow broker, so that the chart shows bursts
	// building a backlog that drains.
	g := startWith(t, "sqlite", testToken, 10, 150*time.Millisecond)
	g.mb.SetLatency(8 * time.Millisecond)
	// The poison event: the broker refuses its key. Its payload tries to
	// run a script in the operator's browser.
	poison(g.mb, "order-7", "scan-42")
	evil := `{"note":"<img src=x onerror=\"window.pwned=1\"><script>window.pwned=2</script>","amount":1299}`
	enqueue(t, g.st, msg("order-7", evil))
	enqueue(t, g.st, outbox.Message{Topic: "scans", Key: "scan-42", Type: "ScanUploaded", ContentType: "application/octet-stream", Payload: []byte{0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a, 0xff}})
	// Traffic for the chart: bursts that build a backlog and drain.
	traffic := 0
	for burst := range 8 {
		var msgs []outbox.Message
		for i := range 200 + 200*(burst%4) {
			msgs = append(msgs, msg(fmt.Sprintf("order-%d", 1000+burst*1000+i), `{"paid":true}`))
		}
		enqueue(t, g.st, msgs...)
		traffic += len(msgs)
		time.Sleep(500 * time.Millisecond)
	}
	waitFor(t, "the traffic to drain", 90*time.Second, func() bool { return len(g.mb.Events("orders.paid")) >= traffic })
	waitFor(t, "two dead events", 60*time.Second, func() bool { return len(g.deadIDs(t)) == 2 })
	ids := g.deadIDs(t)
	row := func(id int64) string { return fmt.Sprintf(`#dead tbody tr[data-id="%d"]`, id) }

	step(t, ctx, "open the dashboard and see the dead letter", 20*time.Second,
		chromedp.Navigate(g.srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(row(ids[0])+" pre.payload")),
		chromedp.WaitVisible(chromedp.CSS(row(ids[1]))),
	)
	if got := evalString(t, ctx, `document.querySelector('`+row(ids[0])+` pre.payload').textContent`); got != evil {
		t.Errorf("the payload preview shows %q; want the payload as text %q", got, evil)
	}
	if got := evalString(t, ctx, `String(window.pwned) + " " + document.querySelectorAll('#dead img, #dead script').length`); got != "undefined 0" {
		t.Errorf("the payload's markup became part of the page (window.pwned, elements): %s", got)
	}
	if got := evalString(t, ctx, `document.querySelector('`+row(ids[0])+` td.err').textContent`); !strings.Contains(got, "no route for key order-7") {
		t.Errorf("last error shown: %q", got)
	}
	if got := evalString(t, ctx, `document.querySelector('`+row(ids[1])+` td:nth-child(8)').textContent`); !strings.Contains(got, "89504e470d0a1a0aff") || !strings.Contains(got, "hex") {
		t.Errorf("binary payload shown as %q; want hex", got)
	}

	// Without the token the click is refused, and says why.
	step(t, ctx, "retry without the token", 10*time.Second,
		click(row(ids[0])+" button.retry"),
		chromedp.Poll[chromedp.Void](`document.getElementById('action-msg').textContent.includes('token')`),
	)
	if n := len(g.mb.Events("orders.paid")); g.deadIDs(t)[0] != ids[0] {
		t.Fatalf("a retry without the token changed something (%d delivered)", n)
	}

	// The operator enters the token, fixes the broker and retries.
	step(t, ctx, "enter the token", 15*time.Second,
		chromedp.SendKeys(chromedp.CSS("#token"), testToken),
		click("#token-use"),
		chromedp.Poll[chromedp.Void](`document.getElementById('token-state').textContent.includes('token set')`),
	)
	if os.Getenv("OUTBOX_SCREENSHOT") == "1" {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		cancel()
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		path := filepath.Join("..", "docs", "dashboard.png")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot saved to %s (%d bytes)", path, len(png))
	}

	poison(g.mb, "scan-42")
	before := len(g.mb.Events("orders.paid"))
	step(t, ctx, "retry", 15*time.Second,
		click(row(ids[0])+" button.retry"),
		chromedp.Poll[chromedp.Void](`document.getElementById('action-msg').textContent.includes('requeued')`),
		chromedp.Poll[chromedp.Void](`!document.querySelector('`+row(ids[0])+`')`, chromedp.WithPollingInterval(100*time.Millisecond)),
	)
	waitFor(t, "the retried event at the broker", 10*time.Second, func() bool { return len(g.mb.Events("orders.paid")) > before })
	var retried []outbox.Event
	for _, e := range g.mb.Events("orders.paid") {
		if e.ID == ids[0] {
			retried = append(retried, e)
		}
	}
	if len(retried) != 1 || string(retried[0].Payload) != evil {
		t.Errorf("the broker got the retried event %d %d times (%v); want once, with its payload", ids[0], len(retried), retried)
	}
	step(t, ctx, "see it delivered in the relay's counters", 10*time.Second,
		chromedp.Poll[chromedp.Void](`document.getElementById('dead').textContent !== '' && document.getElementById('dead-empty').hidden && document.querySelectorAll('#dead tbody tr').length === 1`),
	)
	// Skip takes two clicks (the first turns the button into a confirmation).
	step(t, ctx, "skip the binary dead event", 15*time.Second,
		click(row(ids[1])+" button.skip"),
		chromedp.Poll[chromedp.Void](`document.querySelector('`+row(ids[1])+` button.skip').textContent.includes('delete')`),
		click(row(ids[1])+" button.skip"),
		chromedp.Poll[chromedp.Void](`document.getElementById('action-msg').textContent.includes('skipped')`),
		chromedp.Poll[chromedp.Void](`!document.getElementById('dead-empty').hidden`, chromedp.WithPollingInterval(100*time.Millisecond)),
	)
	if ids := g.deadIDs(t); len(ids) != 0 {
		t.Errorf("dead events after the skip: %v", ids)
	}
}
