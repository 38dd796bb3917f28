package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox/internal/testenv"
)

func TestCDCBadInput(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"relay", "--db", "sqlite::memory:", "--broker", "nats://127.0.0.1:4222", "--source", "binlog"}, exitUsage, "--source must be poll or pgcdc"},
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
	defer pool.Close()
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = pool.Exec(ctx, "DROP PUBLICATION IF EXISTS outbox_"+table+"_pub")
		for _, s := range []string{"", "_cdc", "_archive", "_claims", "_migrations"} {
			_, _ = pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{table + s}.Sanitize())
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
