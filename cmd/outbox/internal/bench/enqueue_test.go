package bench_test

import (
	"context"
	"strings"
	"testing"

	"github.com/outbox-go/outbox/cmd/outbox/internal/bench"
	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// The enqueue-overhead scenario runs end to end on each database: every
// form commits its transactions (the outbox rows are really there), each
// form gets a row per writer count, and the business transaction alone is
// the limit the others are read against.
func TestRunEnqueue(t *testing.T) {
	forms := map[string]int{"postgres": 4, "mysql": 2, "sqlite": 2}
	for _, kind := range teststores.Kinds {
		t.Run(kind, func(t *testing.T) {
			var out strings.Builder
			rows, err := bench.RunEnqueue(context.Background(), bench.EnqueueConfig{
				DBURL: teststores.URL(t, kind), Writers: []int{1, 4}, Transactions: 50, Rounds: 2, Out: &out,
				OpenStore: wire.OpenStore, SQLDB: wire.SQLDB,
			})
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if len(rows) != 2*forms[kind] {
				t.Fatalf("%d rows, want %d forms × 2 writer counts:\n%s", len(rows), forms[kind], out.String())
			}
			for i, r := range rows {
				first := i%forms[kind] == 0
				if r.Limit != first || r.TxPerSec <= 0 || (first && !r.InRoundTrip) || r.OverheadMin > r.Overhead || r.Overhead > r.OverheadMax {
					t.Errorf("implausible row %+v", r)
				}
			}
			if !strings.Contains(out.String(), "| 4 | + outbox row, own statement") {
				t.Errorf("no table printed:\n%s", out.String())
			}
		})
	}
}
