package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox/source/binlog"
	"github.com/outbox-go/outbox/source/pgcdc"
	"github.com/outbox-go/outbox/store/mysqlstore"
)

// sourceState is where a log source (pgcdc, binlog) of the table stands:
// the --json shape of `outbox status`'s sources; field names are stable.
type sourceState struct {
	Source     string     `json:"source"`         // pgcdc or binlog
	Slot       string     `json:"slot,omitempty"` // pgcdc: the replication slot
	Position   string     `json:"position"`       // the LSN, or binlog file:pos; "" before the first save
	GTID       string     `json:"gtid,omitempty"` // binlog: MariaDB's GTID position there
	LagBytes   int64      `json:"lag_bytes"`      // log written after Position
	Owner      string     `json:"owner"`          // the process that holds or last held the lease
	Epoch      int64      `json:"epoch"`
	Streaming  bool       `json:"streaming"` // the lease is live
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
}

// readSources reads the state of the table's log sources: none when no
// log source ever ran on it (or on SQLite, which has none).
func readSources(ctx context.Context, f *flags) ([]sourceState, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	until := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	switch {
	case strings.HasPrefix(f.db, "postgres://") || strings.HasPrefix(f.db, "postgresql://"):
		pool, err := pgxpool.New(ctx, f.db)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		states, err := pgcdc.ReadStates(ctx, pool, pgcdc.Config{Table: f.table, Schema: f.schema})
		if errors.Is(err, pgcdc.ErrNoState) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		out := make([]sourceState, len(states))
		for i, st := range states {
			out[i] = sourceState{Source: "pgcdc", Slot: st.Slot, Position: st.Confirmed, LagBytes: st.LagBytes,
				Owner: st.Owner, Epoch: st.Epoch, Streaming: st.Live, LeaseUntil: until(st.Until)}
		}
		return out, nil
	case strings.HasPrefix(f.db, "mysql://") || strings.HasPrefix(f.db, "mariadb://"):
		dsn, err := mysqlstore.DSN(f.db)
		if err != nil {
			return nil, err
		}
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return nil, err
		}
		defer db.Close()
		sv, err := binlog.SavedLag(ctx, db, binlog.Config{Table: f.table, Schema: f.schema})
		if errors.Is(err, binlog.ErrNoState) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		st := sourceState{Source: "binlog", GTID: sv.GTID, LagBytes: sv.LagBytes, Owner: sv.Owner, Epoch: sv.Epoch,
			Streaming: sv.Live, LeaseUntil: until(sv.Until)}
		if sv.File != "" {
			st.Position = fmt.Sprintf("%s:%d", sv.File, sv.Pos)
		}
		return []sourceState{st}, nil
	}
	return nil, nil
}

// printSources adds the log sources' lines to `outbox status`.
func printSources(e env, sources []sourceState) {
	for _, s := range sources {
		name := s.Source
		if s.Slot != "" {
			name += " slot " + s.Slot
		}
		pos := s.Position
		switch {
		case pos == "" && s.Source == "binlog":
			pos = "none saved yet (the source delivers from the table first)"
		case pos == "":
			pos = "none (the slot does not exist: the next start creates it)"
		case s.GTID != "":
			pos += " (GTID " + s.GTID + ")"
		}
		who := "nobody streams (no live lease)"
		if s.Streaming {
			who = fmt.Sprintf("streamed by %s (epoch %d)", s.Owner, s.Epoch)
		}
		fmt.Fprintf(e.stdout, "  source          %s: position %s, %d bytes of log behind, %s\n", name, pos, s.LagBytes, who)
	}
}
