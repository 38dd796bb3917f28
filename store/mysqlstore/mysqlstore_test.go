package mysqlstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/mysqlstore"
	"github.com/outbox-go/outbox/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openStore connects to the test server, or fails (CI) / skips (locally).
func openStore(t testing.TB) *mysqlstore.Store {
	t.Helper()
	url := testenv.Require(t, testenv.MySQL)
	st, err := mysqlstore.Open(context.Background(), url, mysqlstore.Config{})
	if err != nil {
		testenv.Unavailable(t, testenv.MySQL, err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// plainDB is a caller's pool as an application might build it: server-side
// prepared statements, no parseTime, the server's time zone, and
// clientFoundRows (which changes what RowsAffected counts).
func plainDB(t testing.TB) *sql.DB {
	t.Helper()
	openStore(t) // skips or fails when the server is not there
	dsn, err := mysqlstore.DSN(testenv.MySQL.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.InterpolateParams, cfg.ParseTime, cfg.ClientFoundRows = false, false, true
	delete(cfg.Params, "time_zone")
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func harness(name string, db *sql.DB) storetest.Harness {
	return storetest.Harness{
		Name: name,
		New: func(opts store.Options) (driver.Store, error) {
			return mysqlstore.New(db, mysqlstore.Config{Options: opts})
		},
		Open: func(t *testing.T, opts store.Options) storetest.Fixture {
			st, err := mysqlstore.New(db, mysqlstore.Config{Options: opts})
			if err != nil {
				t.Fatal(err)
			}
			dropTables(t, db, opts.Table)
			t.Cleanup(func() { st.Close() })
			return storetest.Fixture{Store: st, DB: db, Table: st.Table(), Placeholder: storetest.Question}
		},
		ClaimReads: func(ctx context.Context, st driver.Store, req driver.ClaimParams) (driver.Claim, int64, error) {
			return st.(*mysqlstore.Store).ClaimOwnedReads(ctx, req)
		},
	}
}

func uniqueTable(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func dropTables(t testing.TB, db *sql.DB, table string) {
	t.Helper()
	t.Cleanup(func() {
		for _, suffix := range []string{"", "_archive", "_migrations", "_shards", "_relays"} {
			_, _ = db.Exec("DROP TABLE IF EXISTS `" + table + suffix + "`")
		}
	})
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, harness("mysql", openStore(t).DB()))
}

func TestConformancePlainDSN(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: the suite runs once, over Open's pool")
	}
	storetest.Run(t, harness("mysql-prepared", plainDB(t)))
}

// TestEnqueueChunks: one Enqueue larger than one INSERT may hold (rows and
// bytes) is still atomic and in input order.
func TestEnqueueChunks(t *testing.T) {
	t.Parallel()
	db := openStore(t).DB()
	table := uniqueTable("chunks_")
	dropTables(t, db, table)
	st, err := mysqlstore.New(db, mysqlstore.Config{Options: store.Options{Table: table, MaxPayload: 2 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{0, '\'', '\\', 0xff}, 384<<10) // 1.5 MiB that all need escaping
	var msgs []outbox.Message
	for i := range 5200 {
		m := outbox.Message{Topic: "t", Key: fmt.Sprint(i % 3), Type: fmt.Sprint(i)}
		if i%1300 == 7 { // 4 × 1.5 MiB: over the 4 MiB budget of one INSERT
			m.Payload = big
		}
		msgs = append(msgs, m)
	}
	if err := st.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	c := claimAll(t, st, driver.ClaimParams{Lease: driver.Lease{Owner: "t", Epoch: 1}, Limit: len(msgs)})
	if len(c.Events) != len(msgs) {
		t.Fatalf("claimed %d of %d", len(c.Events), len(msgs))
	}
	for i, ev := range c.Events {
		if ev.Type != msgs[i].Type || !bytes.Equal(ev.Payload, msgs[i].Payload) {
			t.Fatalf("event %d in id order is message %s; ids must follow input order across INSERT statements", i, ev.Type)
		}
	}
	msgs[len(msgs)-1].EventID = c.Events[0].EventID // a duplicate in the last chunk
	if err := st.Enqueue(ctx, msgs...); err == nil {
		t.Fatal("Enqueue with a duplicate event id succeeded")
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+st.Table()).Scan(&n); err != nil || n != len(msgs) {
		t.Fatalf("after a failed multi-statement Enqueue the table holds %d rows (%v); want %d: it must be atomic", n, err, len(msgs))
	}
}

// TestOpen: Config.Schema names (and Migrate creates) the database; Open's
// errors say what is wrong in one line.
func TestOpen(t *testing.T) {
	t.Parallel()
	url := testenv.Require(t, testenv.MySQL)
	ctx := t.Context()
	schema := uniqueTable("outbox_it_")
	st, err := mysqlstore.Open(ctx, url, mysqlstore.Config{Options: store.Options{Schema: schema}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = st.DB().Exec("DROP DATABASE IF EXISTS `" + schema + "`")
		st.Close()
	})
	if want := "`" + schema + "`.`outbox`"; st.Table() != want {
		t.Errorf("Table() = %s; want %s", st.Table(), want)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Enqueue(ctx, outbox.Message{Topic: "t", Type: "T"}); err != nil {
		t.Fatal(err)
	}
	if c := claimAll(t, st, driver.ClaimParams{Lease: driver.Lease{Owner: "o", Epoch: 1}}); len(c.Events) != 1 {
		t.Fatalf("claim in database %s: %d events", schema, len(c.Events))
	}

	noDB, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	noDB.Path = "/no_such_db_x"
	for _, tt := range []struct {
		url, want string
		badURL    bool // errors.Is(err, ErrBadURL): the URL itself is wrong
	}{
		{noDB.String(), `database "no_such_db_x" does not exist`, false},
		{"mysql://root:hunter22@127.0.0.1:1/test", "cannot reach 127.0.0.1:1", false},
		{"mysql://root@127.0.0.1:3306/", "names no database", true},
		{"postgres://root@127.0.0.1/test", "bad database URL", true},
		{"mysql://root:hunter22@127.0.0.1/test?x=%zz", "invalid URL escape", true},
		{"mysql://root:hunter22@tcp(h:1)/test", "bad database URL", true},
	} {
		_, err := mysqlstore.Open(ctx, tt.url, mysqlstore.Config{})
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "hunter22") || strings.Contains(err.Error(), "\n") {
			t.Errorf("Open(%s): %v; want one line containing %q, without the password", testenv.Mask(tt.url), err, tt.want)
		}
		if errors.Is(err, mysqlstore.ErrBadURL) != tt.badURL {
			t.Errorf("Open(%s): errors.Is(%v, ErrBadURL) = %v, want %v", testenv.Mask(tt.url), err, !tt.badURL, tt.badURL)
		}
	}
}

// claimAll claims from every shard as req.Lease.Owner, the only relay.
func claimAll(t testing.TB, st *mysqlstore.Store, req driver.ClaimParams) driver.Claim {
	t.Helper()
	ctx := context.Background()
	own, err := st.Balance(ctx, driver.BalanceParams{Owner: req.Lease.Owner, LeaseFor: time.Minute, HoldDeadKeys: req.HoldDeadKeys})
	if err != nil {
		t.Fatal(err)
	}
	req.Shards = own.Held
	c, err := st.Claim(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
