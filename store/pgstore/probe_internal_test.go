package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/store"
)

// unmigratedStore is a Store on a fresh table name, nothing created yet;
// its tables and domains are dropped when t ends.
func unmigratedStore(t *testing.T) (*pgxpool.Pool, *Store) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), testenv.Require(t, testenv.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "mig_" + hex.EncodeToString(b)
	s, err := New(pool, Config{Options: store.Options{Table: name}})
	if err != nil {
		pool.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range TableNames(name) {
			_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{n}.Sanitize())
		}
		for _, n := range DomainNames(name) {
			_, _ = pool.Exec(context.Background(), "DROP DOMAIN IF EXISTS "+pgx.Identifier{n}.Sanitize())
		}
		pool.Close()
	})
	return pool, s
}

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
	scanned := false
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		scanned = scanned || strings.Contains(line, "Index Only Scan")
		if m := re.FindStringSubmatch(line); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			fetches += n
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !scanned {
		t.Fatal("the probe's plan has no index-only scan of the primary key, so its heap fetches are not counted")
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
	nctx, cancel := context.WithCancel(ctx)
	ch := s.Notify(nctx)
	t.Cleanup(func() { cancel(); _ = s.Close() })
	time.Sleep(100 * time.Millisecond) // the probe has seen the empty table
	for len(ch) > 0 {
		<-ch // the listener's wake-up when it starts
	}
	if _, err := pool.Exec(ctx, insert, 100); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch: // the probe has seen id 100
	case <-time.After(3 * time.Second):
		t.Fatal("no wake-up within 3 s of 100 rows committed")
	}
	time.Sleep(20 * time.Millisecond)
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

// A producer's transaction takes its id first and commits last: below an
// id the probe has seen, after the higher row was delivered (deleted) and
// long after the relay's looks again; and, the harder case, below a row
// that stays in the table (a DEAD one above every other id), where no max
// over the table changes. The probe's look at the table's writers finds
// it: the transaction was open at an earlier look and is gone.
func TestProbeNoticesALateCommit(t *testing.T) {
	for _, stays := range []bool{false, true} {
		t.Run(map[bool]string{false: "below the newest seen", true: "below a row that stays"}[stays], func(t *testing.T) {
			ctx := context.Background()
			pool, s := unmigratedStore(t)
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			s.probeEvery = 5 * time.Millisecond
			ins := "INSERT INTO " + s.table + " (topic, event_type, payload) VALUES ('t', 'T', '\\x7b7d') RETURNING id"
			nctx, cancel := context.WithCancel(ctx)
			ch := s.Notify(nctx)
			t.Cleanup(func() { cancel(); _ = s.Close() })
			time.Sleep(100 * time.Millisecond)
			late, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer late.Rollback(ctx) //nolint:errcheck
			var a, b, dead int64
			if err := late.QueryRow(ctx, ins).Scan(&a); err != nil {
				t.Fatal(err)
			}
			if err := pool.QueryRow(ctx, ins).Scan(&b); err != nil {
				t.Fatal(err)
			}
			if stays {
				if err := pool.QueryRow(ctx, ins).Scan(&dead); err != nil {
					t.Fatal(err)
				}
				if _, err := pool.Exec(ctx, "UPDATE "+s.table+" SET status = 'DEAD', last_error = 'poison' WHERE id = $1", dead); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-ch: // the probe has seen the newer rows
			case <-time.After(3 * time.Second):
				t.Fatal("no wake-up within 3 s of a commit")
			}
			if _, err := pool.Exec(ctx, "DELETE FROM "+s.table+" WHERE id = $1", b); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			for len(ch) > 0 {
				<-ch
			}
			if err := late.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			select {
			case <-ch:
				t.Logf("id %d committed after id %d (DEAD id above: %d): woken %v after its commit", a, b, dead, time.Since(start).Round(time.Millisecond))
			case <-time.After(2 * time.Second):
				t.Fatalf("id %d committed 300 ms after id %d was seen and delivered (DEAD id above: %d): no wake-up within 2 s", a, b, dead)
			}
		})
	}
}

func TestWriterEnded(t *testing.T) {
	for _, c := range []struct {
		before, now []string
		want        bool
	}{
		{nil, nil, false}, {nil, []string{"3/1"}, false}, {[]string{"3/1"}, []string{"3/1"}, false},
		{[]string{"3/1"}, nil, true}, {[]string{"3/1", "4/7"}, []string{"3/1", "3/2", "4/7"}, false},
		{[]string{"3/1", "4/7"}, []string{"3/2", "4/7"}, true}, {[]string{"3/1", "4/7"}, []string{"3/1"}, true},
	} {
		if got := writerEnded(c.before, c.now); got != c.want {
			t.Errorf("writerEnded(%v, %v) = %v, want %v", c.before, c.now, got, c.want)
		}
	}
}

// Ids above the id sequence (a row inserted with an explicit id, rows
// copied in without setval) are no restart: the probe must not read from 0
// again and wake the relay every second with nothing committed.
func TestProbeIDsAboveTheSequenceAreNoRestart(t *testing.T) {
	ctx := context.Background()
	pool, s := unmigratedStore(t)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s.probeEvery = 5 * time.Millisecond
	for _, q := range []string{
		"INSERT INTO " + s.table + " (topic, event_type, payload) VALUES ('t', 'T', '\\x7b7d')",
		"INSERT INTO " + s.table + " (id, topic, event_type, payload) VALUES (1000, 't', 'T', '\\x7b7d')",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	nctx, cancel := context.WithCancel(ctx)
	ch := s.Notify(nctx)
	t.Cleanup(func() { cancel(); _ = s.Close() })
	time.Sleep(200 * time.Millisecond)
	for len(ch) > 0 {
		<-ch
	}
	n := 0
	deadline := time.After(3500 * time.Millisecond)
	for done := false; !done; {
		select {
		case <-ch:
			n++
		case <-deadline:
			done = true
		}
	}
	t.Logf("%d wake-ups in 3.5 s with nothing committed", n)
	if n > 0 {
		t.Errorf("%d spurious wake-ups", n)
	}
}
