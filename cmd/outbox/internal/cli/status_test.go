package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/testkit/teststores"
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
	c, err := teststores.TryClaim(ctx, o.Store, driver.ClaimParams{Lease: driver.Lease{Owner: "t", Epoch: 1}})
	if err != nil || len(c.Events) != 1 {
		t.Fatalf("claim: %v %v", c.Events, err)
	}
	if err := o.Store.Bury(ctx, driver.BuryParams{Lease: c.Lease, Burials: []driver.Burial{{ID: c.Events[0].ID, Error: "permanent: rejected"}}}); err != nil {
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
	if code, out, _ := runCLI("migrate", "--db", url); code != exitOK || !strings.Contains(out, "created table outbox") {
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
	c, err := teststores.TryClaim(ctx, o.Store, driver.ClaimParams{Lease: driver.Lease{Owner: "t", Epoch: 1}})
	if err != nil || len(c.Events) != 1 {
		t.Fatalf("claim: %v %v", c.Events, err)
	}
	reason := `permanent: natsbroker: no JetStream stream captures subject "orders.paid"; create one (outbox broker setup --broker URL --stream NAME --subjects 'orders.paid') or fix the topic`
	if err := o.Store.Bury(ctx, driver.BuryParams{Lease: c.Lease, Burials: []driver.Burial{{ID: c.Events[0].ID, Error: reason}}}); err != nil {
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

// dead show escapes the payload's control characters and prints at most
// showPayloadMax bytes of it, saying how much it left out and how to get
// it whole; --raw writes the exact bytes, --json all of them escaped.
func TestDeadShowPayloadIsEscapedAndCapped(t *testing.T) {
	o := teststores.Open(t, "sqlite", store.Options{MaxPayload: 4 << 20})
	ctx := context.Background()
	big := []byte("{\"a\":\"\x00\x1b[31mred\x1b[0m\u009b2J\",\n\t\"pad\":\"" + strings.Repeat("é", 400_000) + "\"}")
	binary := append([]byte{0xff, 0xfe, 0x1b, '[', '2', 'J'}, bytes.Repeat([]byte{0}, 100)...)
	// text for its first 3 MiB, streamed in pieces of 1 MiB: --json
	// learns it is not UTF-8 only from its last byte
	bigBinary := append(bytes.Repeat([]byte("é"), 3<<19), 0xff)
	for i, p := range [][]byte{big, binary, bigBinary} {
		if err := o.Store.Enqueue(ctx, outbox.Message{Topic: "orders", Key: "k" + itoa(int64(i)), Type: "T", Payload: p}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := teststores.TryClaim(ctx, o.Store, driver.ClaimParams{Lease: driver.Lease{Owner: "t", Epoch: 1}})
	if err != nil || len(c.Events) != 3 {
		t.Fatalf("claim: %v %v", c.Events, err)
	}
	var burials []driver.Burial
	for _, ev := range c.Events {
		burials = append(burials, driver.Burial{ID: ev.ID, Error: "permanent: x"})
	}
	if err := o.Store.Bury(ctx, driver.BuryParams{Lease: c.Lease, Burials: burials}); err != nil {
		t.Fatal(err)
	}
	bigID, binID := itoa(c.Events[0].ID), itoa(c.Events[1].ID)
	db := []string{"--db", o.URL, "--table", o.Opts.Table}

	code, out, stderr := runCLI(append([]string{"dead", "show", bigID}, db...)...)
	if code != exitOK || len(out) > 2*showPayloadMax+1000 || strings.ContainsAny(out, "\x00\x1b\u009b") {
		t.Fatalf("dead show: exit %d %q, %d bytes of output; want at most ~%d bytes, no raw control characters", code, stderr, len(out), showPayloadMax)
	}
	notShown := fmt.Sprintf("bytes not shown; the whole payload: outbox dead show %s --raw > payload.bin", bigID)
	if !strings.Contains(out, `\x00\x1b[31mred`) || !strings.Contains(out, notShown) || !strings.Contains(out, "\n                \t\"pad\"") {
		t.Errorf("dead show: the payload is not escaped, indented and capped with a pointer to --raw:\n%.600s", out)
	}
	if !utf8.ValidString(out) {
		t.Errorf("dead show cut the payload inside a character")
	}

	var raw bytes.Buffer
	if code := Main(ctx, append([]string{"dead", "show", bigID, "--raw"}, db...), &raw, io.Discard); code != exitOK || !bytes.Equal(raw.Bytes(), big) {
		t.Errorf("dead show --raw: exit %d, %d bytes; want the %d bytes of the payload exactly", code, raw.Len(), len(big))
	}
	code, out, _ = runCLI(append([]string{"dead", "show", bigID, "--json"}, db...)...)
	var j recordJSON
	if err := json.Unmarshal([]byte(out), &j); code != exitOK || err != nil || j.Payload != string(big) || strings.ContainsAny(out, "\x00\x1b") {
		t.Errorf("dead show --json: exit %d, %v; want the whole payload, escaped", code, err)
	}

	code, out, _ = runCLI(append([]string{"dead", "show", itoa(c.Events[2].ID), "--json"}, db...)...)
	j = recordJSON{}
	if err := json.Unmarshal([]byte(out), &j); code != exitOK || err != nil || !j.PayloadBase64 || j.Payload != base64.StdEncoding.EncodeToString(bigBinary) || j.PayloadSize != len(bigBinary) {
		t.Errorf("dead show --json of a large payload that is not UTF-8: exit %d, %v, base64 %v, size %d; want it whole, in base64", code, err, j.PayloadBase64, j.PayloadSize)
	}

	code, out, _ = runCLI(append([]string{"dead", "show", binID}, db...)...)
	if code != exitOK || !strings.Contains(out, "(106 bytes, binary; the first 64 in hex: ff fe 1b 5b 32 4a 00") || strings.ContainsAny(out, "\x00\x1b") {
		t.Errorf("dead show of a binary payload:\n%s", out)
	}
	raw.Reset()
	if code := Main(ctx, append([]string{"dead", "show", binID, "--raw"}, db...), &raw, io.Discard); code != exitOK || !bytes.Equal(raw.Bytes(), binary) {
		t.Errorf("dead show --raw of a binary payload: exit %d, %x", code, raw.Bytes())
	}
	if code, _, stderr := runCLI(append([]string{"dead", "show", binID, "--raw", "--json"}, db...)...); code != exitUsage || !strings.Contains(stderr, "not both") {
		t.Errorf("dead show --raw --json: exit %d %q", code, stderr)
	}
}

// A row made DEAD with plain SQL has no last error: dead list and show
// say so instead of leaving the column empty.
func TestDeadWithoutReasonSaysSo(t *testing.T) {
	o := teststores.Open(t, "sqlite", store.Options{})
	ctx := context.Background()
	if _, err := o.DB.ExecContext(ctx, "INSERT INTO "+o.Opts.Table+" (topic, event_key, event_type, payload, status) VALUES ('orders', 'k', 'T', '{}', 'DEAD')"); err != nil {
		t.Fatal(err)
	}
	db := []string{"--db", o.URL, "--table", o.Opts.Table}
	if code, out, _ := runCLI(append([]string{"dead", "list"}, db...)...); code != exitOK || !regexp.MustCompile(`(?m)^1 .* 0 +\(no reason recorded\)$`).MatchString(out) {
		t.Errorf("dead list: exit %d\n%s", code, out)
	}
	if code, out, _ := runCLI(append([]string{"dead", "show", "1"}, db...)...); code != exitOK || !strings.Contains(out, "last error      (no reason recorded)\n") {
		t.Errorf("dead show: exit %d\n%s", code, out)
	}
}

// A row a producer wrote with next_attempt_at 'infinity' holds its key for
// good: status shows it with the reason, and --check fails on it; a row
// whose created_at is text does not stop status from answering.
func TestStatusHeldForGood(t *testing.T) {
	o := teststores.Open(t, "sqlite", store.Options{})
	ctx := context.Background()
	for _, q := range []string{
		"INSERT INTO " + o.Opts.Table + " (topic, event_key, event_type, payload, next_attempt_at) VALUES ('orders', 'k', 'OrderPaid', x'7b7d', 'infinity')",
		"INSERT INTO " + o.Opts.Table + " (topic, event_key, event_type, payload, created_at) VALUES ('orders', 'k2', 'OrderPaid', x'7b7d', 'infinity')",
	} {
		if _, err := o.DB.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	code, out, stderr := runCLI("status", "--db", o.URL, "--table", o.Opts.Table)
	if code != exitOK || !strings.Contains(out, "held for good   1") || !strings.Contains(out, "held for good by their own next_attempt_at") {
		t.Errorf("status: exit %d %q %q; want the held row counted, with the reason", code, out, stderr)
	}
	code, _, stderr = runCLI("status", "--db", o.URL, "--table", o.Opts.Table, "--check", "--max-age", "1h")
	if code != exitCheck || !strings.Contains(stderr, "1 event(s) held for good") {
		t.Errorf("status --check: exit %d %q; want 3 naming the held row", code, stderr)
	}
}
