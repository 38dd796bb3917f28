package main_test

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/pgstore"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// The README's Quick start, step by step, with the outbox command: migrate,
// broker setup, the Go examples' events (pgx transaction and pgx batch) and
// the table contract's plain-SQL row, relay, status --check. Every event
// must reach the stream; none may go DEAD. Names are made unique (table,
// stream, a prefix in front of the README's topics) so that runs on a
// shared server do not collide; the flags and code are the README's.
func TestQuickStart(t *testing.T) {
	dbURL := testenv.Require(t, testenv.Postgres)
	natsURL := testnats.Shared(t)
	table := teststores.UniqueTable("qs_")
	t.Cleanup(func() { teststores.Drop(t, "postgres", dbURL, table) })
	stream := strings.ToUpper(table)
	orders := table + "_orders" // the README's topic "orders"
	ctx := context.Background()
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(binary, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("outbox %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	if out := run("version"); !strings.HasPrefix(out, "outbox ") {
		t.Errorf("outbox version: %q", out)
	}
	run("migrate", "--db", dbURL, "--table", table)
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	if out := run("broker", "setup", "--broker", natsURL, "--stream", stream, "--subjects", orders+","+orders+".>"); !strings.Contains(out, "created stream "+stream) {
		t.Errorf("broker setup: %q", out)
	}

	// The Go examples, on the user's own orders table.
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ordersTable := table + "_biz"
	if _, err := pool.Exec(ctx, "CREATE TABLE "+ordersTable+" (id bigint PRIMARY KEY, status text); INSERT INTO "+ordersTable+" VALUES (7, 'NEW')"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+ordersTable) })
	st, err := pgstore.New(pool, pgstore.Config{Options: store.Options{Table: table}})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE "+ordersTable+" SET status = 'PAID' WHERE id = $1", 7); err != nil {
		t.Fatal(err)
	}
	if err := st.EnqueuePgxTx(ctx, tx, outbox.Message{Topic: orders + ".paid", Key: "order-7", Type: "OrderPaid", Payload: []byte(`{"order_id":7}`)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b := &pgx.Batch{}
	b.Queue("UPDATE "+ordersTable+" SET status = 'PAID' WHERE id = $1", 7)
	if err := st.EnqueueInBatch(b, outbox.Message{Topic: orders + ".paid", Key: "order-7", Type: "OrderPaid", Payload: []byte(`{"order_id":7,"via":"batch"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	// The table contract's plain-SQL producer.
	if _, err := pool.Exec(ctx, "INSERT INTO "+table+" (topic, event_key, event_type, payload) VALUES ($1, 'order-42', 'OrderPaid', '{\"id\":42}')", orders); err != nil {
		t.Fatal(err)
	}
	var ids []string
	rows, err := pool.Query(ctx, "SELECT event_id::text FROM "+table+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if rows.Err() != nil || len(ids) != 3 {
		t.Fatalf("enqueued %d events (%v); want 3", len(ids), rows.Err())
	}

	r := startRelay(t, "--db", dbURL, "--table", table, "--broker", natsURL)
	opened := teststores.OpenAt(t, "postgres", dbURL, store.Options{Table: table})
	waitPending0(t, opened.Store, 30*time.Second)
	r.stop(t)
	if !strings.Contains(r.stderr.String(), "batch=500 workers=3 max_inflight_bytes=64MiB lease=30s") {
		t.Errorf("the relay's start line does not show its settings:\n%s", r.stderr)
	}
	if out, err := exec.Command(binary, "status", "--db", dbURL, "--table", table, "--check", "--max-age", "5m").CombinedOutput(); err != nil {
		t.Errorf("status --check after the Quick start: %v\n%s", err, out)
	}

	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs != 3 {
		t.Fatalf("stream %s holds %+v (%v); want the 3 events", stream, info.State, err)
	}
	var got, subjects []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Header.Get("Nats-Msg-Id"))
		subjects = append(subjects, m.Subject)
	}
	slices.Sort(got)
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		t.Errorf("the stream holds events %v; want %v", got, ids)
	}
	t.Logf("delivered on %v", subjects)
}
