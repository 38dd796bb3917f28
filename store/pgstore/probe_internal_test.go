package pgstore

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// heapFetches runs the probe under EXPLAIN ANALYZE with from as $1 and
// returns the heap fetches of its index scan and the id it returned.
func heapFetches(t *testing.T, s *Store, from int64) (fetches int64, newest int64) {
	t.Helper()
	ctx := context.Background()
	rows, err := s.pool.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF) "+s.probeSQL(), from)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`Heap Fetches: (\d+)`)
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		if m := re.FindStringSubmatch(line); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			fetches += n
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.pool.QueryRow(ctx, s.probeSQL(), from).Scan(&newest); err != nil {
		t.Fatal(err)
	}
	return fetches, newest
}

// The commit probe of a relay that keeps up runs every few milliseconds
// against a table that is mostly empty, with every row delivered since the
// last VACUUM still in the primary key. It must not walk those: it reads
// only the ids above the newest it has seen.
func TestProbeReadsOnlyNewIDs(t *testing.T) {
	ctx := context.Background()
	pool, s := unmigratedStore(t)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"ALTER TABLE " + s.table + " SET (autovacuum_enabled = false)",
		"INSERT INTO " + s.table + " (topic, event_type, payload) SELECT 't', 'T', '\\x7b7d' FROM generate_series(1, 5000)",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	_, newest := heapFetches(t, s, -1)
	if newest < 5000 {
		t.Fatalf("probe from -1 returned %d; want the newest id (≥ 5000)", newest)
	}
	// The relay delivers everything: the rows are deleted, not vacuumed.
	if _, err := pool.Exec(ctx, "DELETE FROM "+s.table); err != nil {
		t.Fatal(err)
	}
	fetches, got := heapFetches(t, s, newest)
	if got != newest {
		t.Fatalf("probe above %d on an empty table returned %d; want %d (nothing new)", newest, got, newest)
	}
	if fetches > 10 {
		t.Fatalf("probe above the newest seen id made %d heap fetches over the 5,000 deleted rows; want none", fetches)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+s.table+" (topic, event_type, payload) VALUES ('t', 'T', '\\x7b7d')"); err != nil {
		t.Fatal(err)
	}
	if _, got := heapFetches(t, s, newest); got != newest+1 {
		t.Fatalf("probe above %d after one INSERT returned %d; want %d", newest, got, newest+1)
	}
}

// After TRUNCATE … RESTART IDENTITY the ids start again below the newest
// the probe has seen, and nothing is ever above it; its once-a-second look
// at the id sequence notices, and the next commits wake the relay all the
// same.
func TestProbeNoticesIDsThatWentBack(t *testing.T) {
	ctx := context.Background()
	pool, s := unmigratedStore(t)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s.probeEvery = 5 * time.Millisecond
	insert := "INSERT INTO " + s.table + " (topic, event_type, payload) SELECT 't', 'T', '\\x7b7d' FROM generate_series(1, $1::int)"
	if _, err := pool.Exec(ctx, insert, 100); err != nil {
		t.Fatal(err)
	}
	nctx, cancel := context.WithCancel(ctx)
	ch := s.Notify(nctx)
	t.Cleanup(func() { cancel(); _ = s.Close() })
	time.Sleep(100 * time.Millisecond) // the probe has seen id 100
	if _, err := pool.Exec(ctx, "TRUNCATE "+s.table+" RESTART IDENTITY"); err != nil {
		t.Fatal(err)
	}
	for len(ch) > 0 {
		<-ch
	}
	if _, err := pool.Exec(ctx, insert, 3); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(3 * time.Second):
		t.Fatal("no wake-up within 3 s for rows committed after the ids restarted below the newest seen")
	}
}
