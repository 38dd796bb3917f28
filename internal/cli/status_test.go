package cli

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/teststores"
	"github.com/outbox-go/outbox/store"
)

// status --check: exit 0 on a healthy table; 3 with one line per reason
// for an old pending event, and for a dead event holding its key; 1 when
// it cannot look.
func TestStatusCheckExitCodes(t *testing.T) {
	o := teststores.Open(t, "sqlite", store.Options{})
	ctx := context.Background()
	base := []string{"status", "--db", o.URL, "--table", o.Opts.Table, "--check"}

	if code, out, stderr := runCLI(base...); code != exitOK || stderr != "" || !strings.Contains(out, "pending         0") {
		t.Errorf("empty table: exit %d %q %q; want 0", code, out, stderr)
	}

	// A pending event an hour old: too old for the default --max-age 5m,
	// fine for --max-age 2h.
	if err := o.Store.Enqueue(ctx, outbox.Message{Topic: "orders.paid", Key: "order-1", Type: "OrderPaid", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	const hour = 3600 * 1_000_000 // the SQLite store keeps microseconds
	if _, err := o.DB.ExecContext(ctx, "UPDATE "+o.Opts.Table+" SET created_at = created_at - ?, next_attempt_at = next_attempt_at - ?", hour, hour); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(base...)
	if code != exitCheck || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "check failed: the oldest pending event is 1h0m0s old, more than --max-age 5m0s") {
		t.Errorf("old pending event: exit %d %q; want 3 and one line on the pending event's age", code, stderr)
	}
	if code, _, stderr := runCLI(append(base, "--max-age", "2h")...); code != exitOK {
		t.Errorf("old pending event, --max-age 2h: exit %d %q; want 0", code, stderr)
	}
	if code, _, stderr := runCLI("status", "--db", o.URL, "--table", o.Opts.Table); code != exitOK {
		t.Errorf("without --check: exit %d %q; want 0 whatever the table holds", code, stderr)
	}

	// Bury it: dead, and its key held; a later event of the key waits.
	c, err := o.Store.Claim(ctx, store.ClaimRequest{Lease: store.Lease{Owner: "t", Epoch: 1}})
	if err != nil || len(c.Events) != 1 {
		t.Fatalf("claim: %v %v", c.Events, err)
	}
	if err := o.Store.Bury(ctx, c.Lease, []store.Burial{{ID: c.Events[0].ID, Error: "permanent: rejected"}}); err != nil {
		t.Fatal(err)
	}
	if err := o.Store.Enqueue(ctx, outbox.Message{Topic: "orders.paid", Key: "order-1", Type: "OrderPaid", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI(append(base, "--max-age", "2h", "--json")...)
	if code != exitCheck || strings.Count(stderr, "\n") != 2 ||
		!strings.Contains(stderr, "check failed: 1 dead event(s)") || !strings.Contains(stderr, "check failed: 1 key(s) held by a dead event") {
		t.Errorf("dead event: exit %d %q; want 3, a line for the dead event and one for its key", code, stderr)
	}
	if !strings.Contains(out, `"problems": [`) || !strings.Contains(out, `"dead": 1`) {
		t.Errorf("--json --check does not list the problems: %s", out)
	}

	// Cannot look: exit 1, not 3.
	if code, _, stderr := runCLI("status", "--db", o.URL, "--table", "no_such_table", "--check"); code != exitFail || !strings.Contains(stderr, "no_such_table does not exist") {
		t.Errorf("missing table: exit %d %q; want 1 naming the table", code, stderr)
	}
}

// status, dead and relay on a SQLite file that does not exist say so and
// leave no file behind; migrate creates it.
func TestMissingSQLiteFileIsNotCreated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typo.db")
	url := "sqlite:" + path
	for _, args := range [][]string{
		{"status", "--db", url},
		{"status", "--db", url, "--check"},
		{"dead", "list", "--db", url},
		{"relay", "--db", url, "--broker", "nats://127.0.0.1:1"},
	} {
		code, _, stderr := runCLI(args...)
		if code != exitFail || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "SQLite database file "+path+" does not exist") {
			t.Errorf("%q: exit %d %q; want 1 saying the file does not exist", args, code, stderr)
		}
		if _, err := os.Stat(path); err == nil {
			t.Fatalf("%q created %s", args, path)
		}
	}
	if code, out, _ := runCLI("migrate", "--db", url); code != exitOK || !strings.Contains(out, "table outbox is up to date") {
		t.Errorf("migrate: exit %d %q", code, out)
	}
	if code, _, stderr := runCLI("status", "--db", url); code != exitOK {
		t.Errorf("status after migrate: exit %d %q", code, stderr)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, stderr := runCLI(args...)
		if code != exitOK || stderr != "" || !strings.HasPrefix(out, "outbox ") || !strings.Contains(out, runtime.Version()) || strings.Count(out, "\n") != 1 {
			t.Errorf("%q: exit %d %q %q; want one line with the version and %s", args, code, out, stderr, runtime.Version())
		}
	}
}

// dead list shows the whole reason, wrapped under LAST ERROR (it used to
// cut it at 80 characters, just after the adapter's prefix); dead show
// prints everything, the payload too.
func TestDeadListShowsTheReason(t *testing.T) {
	o := teststores.Open(t, "sqlite", store.Options{})
	ctx := context.Background()
	payload := `{"order_id":42,"pad":"` + strings.Repeat("x", 3000) + `"}`
	if err := o.Store.Enqueue(ctx, outbox.Message{Topic: "orders.paid", Key: "order-42", Type: "OrderPaid", Payload: []byte(payload), Headers: map[string]string{"b": "2", "a": "1"}}); err != nil {
		t.Fatal(err)
	}
	c, err := o.Store.Claim(ctx, store.ClaimRequest{Lease: store.Lease{Owner: "t", Epoch: 1}})
	if err != nil || len(c.Events) != 1 {
		t.Fatalf("claim: %v %v", c.Events, err)
	}
	reason := `permanent: natsbroker: no JetStream stream captures subject "orders.paid"; create one (outbox broker setup --broker URL --stream NAME --subjects 'orders.paid') or fix the topic`
	if err := o.Store.Bury(ctx, c.Lease, []store.Burial{{ID: c.Events[0].ID, Error: reason}}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI("dead", "list", "--db", o.URL, "--table", o.Opts.Table)
	if code != exitOK {
		t.Fatalf("dead list: exit %d %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	errCol := strings.Index(lines[0], "LAST ERROR")
	var got []string
	for _, l := range lines[1:] {
		if len(l) > errCol {
			got = append(got, l[errCol:])
		}
	}
	if strings.Join(got, " ") != reason {
		t.Errorf("dead list's LAST ERROR reads %q; want the whole reason %q\n%s", strings.Join(got, " "), reason, out)
	}
	code, out, _ = runCLI("dead", "show", itoa(c.Events[0].ID), "--db", o.URL, "--table", o.Opts.Table)
	if code != exitOK || !strings.Contains(out, payload) || !strings.Contains(out, reason) ||
		!regexp.MustCompile(`header +a: 1\nheader +b: 2\n`).MatchString(out) {
		t.Errorf("dead show does not print everything (payload, error, headers sorted): exit %d\n%.500s", code, out)
	}
}
