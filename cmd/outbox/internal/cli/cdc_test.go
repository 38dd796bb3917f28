package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/pgstore"
	"github.com/outbox-go/outbox/testkit/teststores"
)

func TestCDCBadInput(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"relay", "--db", "sqlite::memory:", "--broker", "nats://127.0.0.1:4222", "--source", "canal"}, exitUsage, "--source must be poll, pgcdc or binlog"},
		{[]string{"relay", "--db", "sqlite::memory:", "--broker", "nats://127.0.0.1:4222", "--source", "binlog"}, exitUsage, "needs a MariaDB --db"},
		{[]string{"relay", "--db", "sqlite::memory:", "--broker", "nats://127.0.0.1:4222", "--source", "pgcdc"}, exitUsage, "needs a PostgreSQL --db"},
		{[]string{"cdc"}, exitUsage, "say drop-slot or lag"},
		{[]string{"cdc", "vacuum"}, exitUsage, `unknown cdc command "vacuum"`},
		{[]string{"cdc", "drop-slot"}, exitUsage, "no database given"},
		{[]string{"cdc", "drop-slot", "--db", "postgres://127.0.0.1:1/x", "--slot", "Bad-Name"}, exitUsage, "slot"},
		{[]string{"cdc", "lag", "--db", "postgres://u:s3cret@127.0.0.1:1/x"}, exitFail, "cannot reach"},
	}
	for _, c := range cases {
		code, _, stderr := runCLI(c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 || strings.Contains(stderr, "s3cret") {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and one line with %q", c.args, code, stderr, c.code, c.want)
		}
	}
}

// migrate --cdc sets up the publication; cdc lag and drop-slot speak about
// the slot.
func TestMigrateCDCAndDropSlot(t *testing.T) {
	url := testenv.Require(t, testenv.Postgres)
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	table := "clicdc_" + hex.EncodeToString(b)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer pool.Close() // here: a deferred Close would run before this cleanup
		ctx := context.Background()
		_, _ = pool.Exec(ctx, "DROP PUBLICATION IF EXISTS outbox_"+table+"_pub")
		for _, n := range append(pgstore.TableNames(table), table+"_cdc") {
			_, _ = pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{n}.Sanitize())
		}
		for _, n := range pgstore.DomainNames(table) {
			_, _ = pool.Exec(ctx, "DROP DOMAIN IF EXISTS "+pgx.Identifier{n}.Sanitize())
		}
	})
	code, out, stderr := runCLI("migrate", "--db", url, "--table", table, "--cdc")
	if code != 0 || !strings.Contains(out, "publication outbox_"+table+"_pub") {
		t.Fatalf("migrate --cdc: exit %d, %s %s", code, out, stderr)
	}
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_publication_tables WHERE pubname = $1 AND tablename = $2", "outbox_"+table+"_pub", table).Scan(&n); err != nil || n != 1 {
		t.Fatalf("publication tables: %d, %v", n, err)
	}
	if code, _, stderr := runCLI("cdc", "lag", "--db", url, "--table", table); code != exitFail || !strings.Contains(stderr, "does not exist") {
		t.Fatalf("cdc lag without a slot: exit %d, %s", code, stderr)
	}
	if code, out, stderr := runCLI("cdc", "drop-slot", "--db", url, "--table", table); code != 0 || !strings.Contains(out, "dropped") {
		t.Fatalf("cdc drop-slot without a slot: exit %d, %s %s", code, out, stderr)
	}
}

// `outbox relay --source pgcdc` is the relay over a Source: its metrics
// (the relay's and the slot's lag), /readyz and the delivery counters work
// as for the polling relay.
func TestRelayPgcdcServesTelemetry(t *testing.T) {
	o := teststores.Open(t, "postgres", store.Options{})
	table := o.Opts.Table
	pool, err := pgxpool.New(context.Background(), o.URL)
	if err != nil {
		t.Fatal(err)
	}
	// (closed by the cleanup, which needs it: a deferred Close runs
	// before the cleanups, and the slot stayed behind, holding WAL)
	t.Cleanup(func() {
		defer pool.Close()
		ctx := context.Background()
		slot := "outbox_" + table
		for range 50 {
			_, _ = pool.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL", slot)
			if _, err := pool.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		_, _ = pool.Exec(ctx, "DROP PUBLICATION IF EXISTS outbox_"+table+"_pub")
		_, _ = pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{table + "_cdc"}.Sanitize())
	})
	natsURL := testnats.Shared(t)
	stream := testnats.NewStream(t, natsURL)
	enqueueN(t, o.Store, stream.Topic("orders"), 20)
	checkSourceStatus(t, o.URL, table, "pgcdc", "before any pgcdc relay", "none")
	r := startRelayCLI(t, "--db", o.URL, "--table", table, "--broker", natsURL, "--source", "pgcdc")
	r.waitFor("the events", 30*time.Second, streamHolds(t, stream, 20))
	r.waitFor("/readyz 200", 30*time.Second, func() bool { code, _ := r.get("/readyz"); return code == 200 })
	checkSourceStatus(t, o.URL, table, "pgcdc", "while the pgcdc relay runs", "streaming")
	var m string
	r.waitFor("the metrics to count the deliveries", 10*time.Second, func() bool {
		_, m = r.get("/metrics")
		return strings.Contains(m, `outbox_events_settled_total{outcome="delivered"} 20`)
	})
	for _, want := range []string{"outbox_cdc_lag_bytes", `outbox_events_published_total{topic="` + stream.Topic("orders") + `"} 20`, "outbox_in_flight_events 0", "outbox_broker_up 1", "outbox_store_up 1"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, m)
		}
	}
	if code := r.stop(); code != exitOK {
		t.Fatalf("relay exit %d:\n%s", code, r.log())
	}
	checkSourceStatus(t, o.URL, table, "pgcdc", "after the pgcdc relay stopped", "stopped")
}

// `outbox relay --source binlog` is the relay over the binlog source: its
// metrics (the relay's and outbox_cdc_lag_bytes), /readyz and the delivery
// counters work as for the polling relay; `outbox cdc lag` on MariaDB
// reports the saved position.
func TestRelayBinlogServesTelemetry(t *testing.T) {
	o := teststores.Open(t, "mysql", store.Options{})
	table := o.Opts.Table
	t.Cleanup(func() { _, _ = o.DB.Exec("DROP TABLE IF EXISTS `" + table + "_binlog`") })
	if code, _, stderr := runCLI("cdc", "lag", "--db", o.URL, "--table", table); code != exitFail || !strings.Contains(stderr, "no binlog source state") {
		t.Fatalf("cdc lag before any binlog relay: exit %d, %s", code, stderr)
	}
	natsURL := testnats.Shared(t)
	stream := testnats.NewStream(t, natsURL)
	enqueueN(t, o.Store, stream.Topic("orders"), 20)
	checkSourceStatus(t, o.URL, table, "binlog", "before any binlog relay", "none")
	r := startRelayCLI(t, "--db", o.URL, "--table", table, "--broker", natsURL, "--source", "binlog")
	r.waitFor("the events", 30*time.Second, streamHolds(t, stream, 20))
	r.waitFor("/readyz 200", 30*time.Second, func() bool { code, _ := r.get("/readyz"); return code == 200 })
	checkSourceStatus(t, o.URL, table, "binlog", "while the binlog relay runs", "streaming")
	var m string
	r.waitFor("the metrics to count the deliveries", 10*time.Second, func() bool {
		_, m = r.get("/metrics")
		return strings.Contains(m, `outbox_events_settled_total{outcome="delivered"} 20`)
	})
	for _, want := range []string{"outbox_cdc_lag_bytes", `outbox_events_published_total{topic="` + stream.Topic("orders") + `"} 20`, "outbox_in_flight_events 0", "outbox_broker_up 1", "outbox_store_up 1"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, m)
		}
	}
	if code := r.stop(); code != exitOK {
		t.Fatalf("relay exit %d:\n%s", code, r.log())
	}
	checkSourceStatus(t, o.URL, table, "binlog", "after the binlog relay stopped", "stopped")
	if code, out, stderr := runCLI("cdc", "lag", "--db", o.URL, "--table", table); code != 0 || !strings.Contains(out, "saved position mariadb-bin.") {
		t.Fatalf("cdc lag after the binlog relay: exit %d, %s %s", code, out, stderr)
	}
}

// checkSourceStatus runs `outbox status` (text and --json) on table and
// checks what it says of its log source: none, streaming, or stopped.
func checkSourceStatus(t *testing.T, url, table, source, when string, want string) {
	t.Helper()
	code, out, stderr := runCLI("status", "--db", url, "--table", table)
	if code != exitOK || stderr != "" {
		t.Fatalf("status %s: exit %d\n%s\n%s", when, code, out, stderr)
	}
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "source ") {
			line = l
		}
	}
	code, js, stderr := runCLI("status", "--db", url, "--table", table, "--json")
	var got statusJSON
	if code != exitOK || json.Unmarshal([]byte(js), &got) != nil {
		t.Fatalf("status --json %s: exit %d\n%s\n%s", when, code, js, stderr)
	}
	switch want {
	case "none":
		if line != "" || len(got.Sources) != 0 {
			t.Errorf("status %s shows a source: %q %+v", when, line, got.Sources)
		}
		return
	case "streaming":
		if !strings.Contains(line, source) || !strings.Contains(line, "streamed by") || len(got.Sources) != 1 || !got.Sources[0].Streaming || got.Sources[0].Position == "" {
			t.Errorf("status %s: %q %+v; want %s streaming with a position", when, line, got.Sources, source)
		}
	case "stopped":
		if !strings.Contains(line, source) || !strings.Contains(line, "nobody streams") || len(got.Sources) != 1 || got.Sources[0].Streaming || got.Sources[0].Position == "" {
			t.Errorf("status %s: %q %+v; want %s with a position and no streamer", when, line, got.Sources, source)
		}
	}
	if len(got.Sources) == 1 && got.Sources[0].Source != source {
		t.Errorf("status %s: source %q, want %q", when, got.Sources[0].Source, source)
	}
}
