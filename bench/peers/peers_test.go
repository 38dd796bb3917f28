package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox/internal/testenv"
)

// TestSmallRun runs the command against the local PostgreSQL and NATS with
// a small drain (500 events) and one second of latency at 200 ev/s, then
// checks the figures, the --json file and that the run's table and stream
// are gone. Under CI an unreachable server fails the test (testenv).
func TestSmallRun(t *testing.T) {
	dbURL := testenv.Require(t, testenv.Postgres)
	natsURL := testenv.Require(t, testenv.NATS)
	jsonPath := filepath.Join(t.TempDir(), "peers.json")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var stdout, stderr bytes.Buffer
	args := []string{"--db", dbURL, "--broker", natsURL, "--events", "500", "--rate", "200", "--duration", "1s", "--json", jsonPath}
	if code := cli(ctx, args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"peers: drain of 500 events", "phase", "drain", "latency", "p99"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var res Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("--json file: %v\n%s", err, b)
	}
	if res.DrainEvents != 500 || res.DrainRate <= 0 {
		t.Errorf("drain: %d events at %.0f ev/s; want 500 at a positive rate", res.DrainEvents, res.DrainRate)
	}
	if res.LatencyEvents != 200 || res.LatencyReceived != 200 {
		t.Errorf("latency: %d received of %d; want 200 of 200", res.LatencyReceived, res.LatencyEvents)
	}
	if res.LatencyP50Ms <= 0 || res.LatencyP50Ms > res.LatencyP95Ms || res.LatencyP95Ms > res.LatencyP99Ms || res.LatencyP99Ms > res.LatencyMaxMs {
		t.Errorf("latency percentiles out of order: p50 %v p95 %v p99 %v max %v", res.LatencyP50Ms, res.LatencyP95Ms, res.LatencyP99Ms, res.LatencyMaxMs)
	}
	if res.Versions["github.com/ThreeDotsLabs/watermill-sql/v4"] == "" || res.Settings["subscribe_batch"] != "1000" {
		t.Errorf("versions %v, settings %v", res.Versions, res.Settings)
	}

	// The run removed its table and its stream.
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	var reg sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT to_regclass($1)::text", res.Table).Scan(&reg); err != nil {
		t.Fatal(err)
	}
	if reg.Valid {
		t.Errorf("table %s still exists after the run", res.Table)
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, res.Stream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("stream %s after the run: %v; want ErrStreamNotFound", res.Stream, err)
	}
}

// TestFlags rejects what the command does not take, before any connection.
func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"--nope"}, {"extra"}} {
		var stdout, stderr bytes.Buffer
		if code := cli(context.Background(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

func TestMakePayload(t *testing.T) {
	for _, n := range []int{30, 200, 1000} {
		p := makePayload(n)
		if len(p) != n || !json.Valid(p) {
			t.Errorf("makePayload(%d): %d bytes, valid JSON %v", n, len(p), json.Valid(p))
		}
	}
}
