package bench_test

import (
	"context"
	"strings"
	"testing"

	"github.com/outbox-go/outbox/cmd/outbox/internal/bench"
	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// A sweep of the drain over key counts, on tables that carry a history of
// archived and DEAD rows, on every database: each point is measured, the
// history is written before the drain, and the table is printed.
func TestSweepWithHistory(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			var out strings.Builder
			c := bench.Config{
				DBURL: teststores.URL(t, kind), BrokerURL: testnats.Shared(t),
				Events: 1000, History: 2000, Dead: 300, KeepSent: true, Out: &out,
				OpenStore: wire.OpenStore, SQLDB: wire.SQLDB,
			}
			sw, err := bench.ParseSweep("keys=1,100")
			if err != nil {
				t.Fatal(err)
			}
			points, err := bench.RunSweep(context.Background(), c, sw)
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if len(points) != 2 || points[0].Value != 1 || points[1].Value != 100 {
				t.Fatalf("points %+v", points)
			}
			for _, p := range points {
				if p.Result.DrainRate <= 0 || p.Result.NaiveRate <= 0 || p.Result.RawSQLRate <= 0 || p.Result.LatencyCount != 0 {
					t.Errorf("keys=%d: implausible drain-only result %+v", p.Value, p.Result)
				}
			}
			for _, want := range []string{"history: 2000 archived events and 300 DEAD rows", "| keys | relay drain", "| 100 |", "naive relay ("} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("the output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

func TestParseSweepRefusesWithOneLine(t *testing.T) {
	for _, bad := range []string{"keys", "keys=", "rate=1,2", "keys=1,x", "events=0"} {
		if _, err := bench.ParseSweep(bad); err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "--sweep") {
			t.Errorf("ParseSweep(%q) = %v; want one line naming --sweep", bad, err)
		}
	}
}
