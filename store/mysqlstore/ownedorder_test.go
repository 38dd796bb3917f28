package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/mysqlstore"
)

// NOW(6) is a statement's start; the rows it reads are those committed
// when InnoDB opens its read view, later (a metadata lock wait, a loaded
// machine). And a row's created_at is its INSERT's start, while its id is
// given when the row is written. So writer A can begin first (created_at
// t0) and get the higher id, writer B begin later (created_at t1) and get
// the lower id and commit first, and a claim that started between t0 and
// t1 read both: by the clock alone B is "not due" and A, the key's later
// row, would be claimed without it. The claim's stall is replayed with a
// pool whose session clock is pinned (SET timestamp) to a time between
// the two writers' starts; writer A's INSERT sleeps before it writes.
func TestClaimKeyOrderAcrossClaimStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openStore(t).DB()
	// The replay depends on timing (B must begin within A's sleep): on a
	// loaded machine it is tried again on a fresh table.
	var table string
	var ids []int64
	var created []float64
	for attempt := 1; ; attempt++ {
		table, ids, created = replayWriters(t, db)
		if len(ids) == 2 && created[0] > created[1] {
			break
		}
		if attempt == 5 {
			t.Fatalf("the replay did not happen in %d tries: rows %v created at %v; want the lower id created later", attempt, ids, created)
		}
	}
	// The claim: its clock is a start between the two writers' starts.
	tc := (created[0] + created[1]) / 2
	pinned := pinnedDB(t, tc)
	st, err := mysqlstore.New(pinned, mysqlstore.Config{Options: store.Options{Table: table}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() }) // its heartbeat's session connection
	lease := driver.Lease{Owner: "relay-a", Epoch: 1}
	req := driver.ClaimParams{Lease: lease, Limit: 10, LeaseFor: time.Hour}
	own, err := st.Balance(ctx, driver.BalanceParams{Owner: "relay-a", LeaseFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	req.Shards = own.Held
	c, err := st.Claim(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]int64, len(c.Events))
	for i, e := range c.Events {
		got[i] = e.ID
	}
	// Either both rows, in order, or none: never the later one alone.
	if len(got) == 1 || (len(got) == 2 && (got[0] != ids[0] || got[1] != ids[1])) {
		t.Fatalf("claim took %v of the key's rows %v: the later row without the earlier one", got, ids)
	}
	t.Logf("claim (clock %.6f) took %v of %v created at %v", tc, got, ids, created)
}

// pinnedDB is a pool over the test server whose sessions' clock is fixed
// at the Unix time at (SET timestamp).
func pinnedDB(t *testing.T, at float64) *sql.DB {
	t.Helper()
	dsn, err := mysqlstore.DSN(testenv.MySQL.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["timestamp"] = fmt.Sprintf("%.6f", at)
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// replayWriters makes a table where writer A begins first and writer B,
// beginning 150 ms later, gets the lower id and commits first; it returns
// the table, its ids and their created_at in id order.
func replayWriters(t *testing.T, db *sql.DB) (string, []int64, []float64) {
	ctx := context.Background()
	table := uniqueTable("ordstart_")
	dropTables(t, db, table)
	writer, err := mysqlstore.New(db, mysqlstore.Config{Options: store.Options{Table: table}})
	if err != nil {
		t.Fatal(err)
	}
	if err := writer.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var t0 float64
	if err := db.QueryRowContext(ctx, "SELECT UNIX_TIMESTAMP(NOW(6))").Scan(&t0); err != nil {
		t.Fatal(err)
	}
	// Writer A: its INSERT starts now (created_at t0) and writes its row
	// 400 ms later, after B's.
	aDone := make(chan error, 1)
	go func() {
		_, err := db.ExecContext(ctx, "INSERT INTO `"+table+"` (topic, event_key, event_type, payload) SELECT 't', 'k', 'T', '{\"v\":2}' FROM DUAL WHERE SLEEP(0.4) = 0")
		aDone <- err
	}()
	time.Sleep(150 * time.Millisecond)
	// Writer B: begins after A (and after the claim's pinned start),
	// gets the lower id, commits first.
	if err := writer.Enqueue(ctx, outbox.Message{Topic: "t", Key: "k", Type: "T", Payload: []byte(`{"v":1}`)}); err != nil {
		t.Fatal(err)
	}
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	var ids []int64
	var created []float64
	rows, err := db.QueryContext(ctx, "SELECT id, UNIX_TIMESTAMP(created_at) FROM `"+table+"` ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var c float64
		if err := rows.Scan(&id, &c); err != nil {
			t.Fatal(err)
		}
		ids, created = append(ids, id), append(created, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return table, ids, created
}
