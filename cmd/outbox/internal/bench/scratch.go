package bench

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/pgstore"
)

// scratch is a run's fresh outbox table: its store, a database/sql handle
// on the same database, the database's dialect, and the run's other tables
// (dropped with it).
type scratch struct {
	st      driver.Store
	db      *sql.DB
	dialect string
	table   string
	extra   []string
}

// openScratch opens and migrates the outbox table opts.Table at url.
func openScratch(ctx context.Context, url string, opts store.Options,
	open func(context.Context, string, store.Options) (driver.Store, error),
	sqlDB func(string) (*sql.DB, string, error), extra ...string) (*scratch, error) {
	st, err := open(ctx, url, opts)
	if err != nil {
		return nil, err
	}
	db, dialect, err := sqlDB(url)
	if err != nil {
		st.Close()
		return nil, err
	}
	// The bench's writers, floor sampler and naive relay share this
	// handle; database/sql keeps 2 idle connections by default and closes
	// the others after each use, so 8 writers at 1,000 events/s opened a
	// new PostgreSQL session (a process) about 11 times a second, CPU the
	// relays measured beside them lost. A producer keeps its sessions.
	db.SetMaxIdleConns(scratchConns)
	s := &scratch{st: st, db: db, dialect: dialect, table: opts.Table, extra: extra}
	if err := st.Migrate(ctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// scratchConns is the most sessions the bench's own work holds at once
// (steadyLoad's writers and the floor sampler, or the naive relay's
// transactions), kept open between uses.
const scratchConns = 16

// close drops the tables, then closes the handles.
func (s *scratch) close() {
	dropBenchTables(s.db, s.dialect, s.table, s.extra...)
	s.db.Close()
	s.st.Close()
}

// payloadOf is the runs' JSON payload of about size bytes.
func payloadOf(size int) []byte {
	return []byte(`{"order_id":42,"customer":"c-7","status":"PAID","pad":"` + strings.Repeat("x", max(size-60, 0)) + `"}`)
}

// dropBenchTables removes the outbox table table, its companions and the
// extra tables given, and on PostgreSQL what relays run with --source
// pgcdc left: the replication slot (an inactive slot keeps every WAL
// segment from then on, and a server has few), the publication.
func dropBenchTables(db *sql.DB, dialect, table string, extra ...string) {
	for _, t := range []string{"", "_archive", "_migrations", "_claims", "_lock", "_shards", "_relays", "_cdc", "_dead", "_binlog"} {
		_, _ = db.Exec("DROP TABLE IF EXISTS " + table + t)
	}
	for _, t := range extra {
		_, _ = db.Exec("DROP TABLE IF EXISTS " + t)
	}
	if dialect != "postgres" {
		return
	}
	for _, d := range pgstore.DomainNames(table) {
		_, _ = db.Exec("DROP DOMAIN IF EXISTS " + d)
	}
	_, _ = db.Exec("DROP PUBLICATION IF EXISTS outbox_" + table + "_pub")
	// a relay just stopped may hold the slot for a moment more
	for range 50 {
		var left bool
		if db.QueryRow("SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", "outbox_"+table).Scan(&left) != nil || !left {
			return
		}
		_, _ = db.Exec("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", "outbox_"+table)
		time.Sleep(100 * time.Millisecond)
	}
}
