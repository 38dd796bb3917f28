package torture

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The source=pgcdc cell: the relays stream the outbox table's inserts from
// a replication slot of their own (one streams, the others wait on its
// lease), so the faults aim at the process that streams, the fencing probe
// checks the lease of <table>_cdc instead of claims, and the run ends with
// the slot check.

// The source=binlog cell is the same on MariaDB: one relay tails the
// binlog under the lease of <table>_binlog, the faults aim at it, and the
// run ends with every row delivered and deleted.

// cdc reports whether the relays run a log source (pgcdc or binlog).
func (r *run) cdc() bool { return r.cfg.Source == "pgcdc" || r.cfg.Source == "binlog" }

// binlog reports whether the relays run the binlog source.
func (r *run) binlog() bool { return r.cfg.Source == "binlog" }

// binlogState is the binlog source's lease and position table.
func (t tables) binlogState() string { return t.outbox + "_binlog" }

// lease is the query of the streaming lease's owner and epoch (when it is
// held) of the run's source.
func (r *run) lease() (query string, args []any) {
	if r.binlog() {
		return "SELECT owner, epoch FROM " + r.t.binlogState() + " WHERE stream = 'binlog' AND lease_until > NOW(6)", nil
	}
	return "SELECT owner, epoch FROM " + r.t.cdcState() + " WHERE slot = $1 AND lease_until > now()", []any{r.t.slot()}
}

// slot and publication are the run's replication slot and publication,
// named after its outbox table (unique per run) and dropped by cleanup.
func (t tables) slot() string        { return "outbox_" + t.outbox }
func (t tables) publication() string { return "outbox_" + t.outbox + "_pub" }
func (t tables) cdcState() string    { return t.outbox + "_cdc" }

// cdcArgs are the relays' extra arguments for the pgcdc source.
func (t tables) cdcArgs() []string {
	// --log-level info: the source's state changes (lease, slot, recovery) are
	// few, and a failed run's history shows them
	return []string{"--slot", t.slot(), "--publication", t.publication(), "--log-level", "info"}
}

// installCDCFence adds the fencing probe of the pgcdc source: a trigger
// that records every change to an outbox row (the deletes after delivery,
// burying) made by a relay session whose owner did not hold the slot's
// lease at that moment. The source locks the lease row and checks it in
// the same transaction as each write, so now() is the instant it checked.
// (The function names <table>_cdc, which the relays create; PL/pgSQL
// resolves it when it runs.)
//
// The probe sees row changes only. The source's other fenced write, the
// pg_terminate_backend of a stale walsender, changes no row, so a
// termination by a process that did not hold the lease would go unseen
// here; it runs behind the same lease check (locked lease row, owner,
// epoch and expiry in the same transaction), which the source's own test
// TestStaleHolderLeavesTheNewStreamAlone exercises on a real server. The
// relays log each termination with their owner and epoch ("terminated its
// walsender"), which a failed run's history shows.
func (t tables) installCDCFence(ctx context.Context, db *sql.DB, prefix string) error {
	state := t.cdcState()
	stmts := []string{
		"CREATE TABLE " + t.stale() + " (id BIGINT NOT NULL, op TEXT NOT NULL, holder TEXT NOT NULL, writer TEXT NOT NULL, at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())",
		`CREATE FUNCTION ` + t.fence() + `() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE app text := coalesce(current_setting('application_name', true), '');
BEGIN
	IF left(app, ` + fmt.Sprint(len(prefix)+7) + `) = '` + prefix + `-relay-'
	   AND NOT EXISTS (SELECT 1 FROM ` + state + ` WHERE slot = '` + t.slot() + `' AND owner = app AND lease_until > now()) THEN
		INSERT INTO ` + t.stale() + ` (id, op, holder, writer)
		VALUES (OLD.id, TG_OP, coalesce((SELECT owner FROM ` + state + ` WHERE slot = '` + t.slot() + `' AND lease_until > now()), ''), app);
	END IF;
	RETURN NULL;
END $$`,
		"CREATE TRIGGER " + t.fence() + " AFTER UPDATE OR DELETE ON " + t.outbox + " FOR EACH ROW EXECUTE FUNCTION " + t.fence() + "()",
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("torture: install the fencing probe: %w", err)
		}
	}
	return nil
}

// dropCDC removes the slot, the publication and the source's tables. The
// relays are stopped by then; a walsender of the run's slot that lingers
// is terminated first.
func (t tables) dropCDC(ctx context.Context, db *sql.DB) {
	for i := 0; i < 50; i++ {
		var pid sql.NullInt64
		err := db.QueryRowContext(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", t.slot()).Scan(&pid)
		if err != nil {
			break // gone (or never made)
		}
		if pid.Valid {
			_, _ = db.ExecContext(ctx, "SELECT pg_terminate_backend($1)", pid.Int64)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if _, err := db.ExecContext(ctx, "SELECT pg_drop_replication_slot($1)", t.slot()); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, _ = db.ExecContext(ctx, "DROP PUBLICATION IF EXISTS "+t.publication())
	for _, n := range []string{t.cdcState(), t.outbox + "_dead", t.outbox + "_dead_migrations"} {
		_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+n)
	}
}

// streamer returns the relay slot whose process holds the streaming lease
// now and the lease's epoch; -1 when none holds it.
func (r *run) streamer(ctx context.Context) (int, int64) {
	var owner string
	var epoch int64
	q, args := r.lease()
	err := r.admin.QueryRowContext(ctx, q, args...).Scan(&owner, &epoch)
	if err != nil {
		return -1, 0
	}
	for i := range r.relays.procs {
		if r.relays.owner(i) == owner {
			return i, epoch
		}
	}
	return -1, epoch
}

// waitStreamer waits up to d for a relay to hold the lease and returns its
// slot and the lease's epoch; fallback when none does by then.
func (r *run) waitStreamer(ctx context.Context, d time.Duration, fallback int) (int, int64) {
	until := time.Now().Add(d)
	for {
		if i, epoch := r.streamer(ctx); i >= 0 {
			return i, epoch
		}
		if time.Now().After(until) || ctx.Err() != nil {
			return fallback, 0
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitStreaming waits until one relay has held the lease for at least
// settle (at most limit) and returns its slot and epoch; the last seen when
// limit passes first.
func (r *run) waitStreaming(ctx context.Context, slot int, epoch int64, settle, limit time.Duration) (int, int64) {
	began := time.Now()
	since := began
	for time.Since(since) < settle && time.Since(began) < limit && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
		i, e := r.streamer(ctx)
		if i < 0 {
			continue
		}
		if i != slot || e != epoch {
			slot, epoch, since = i, e, time.Now()
		}
	}
	return slot, epoch
}

// epoch is the lease's epoch now (0 when unknown).
func (r *run) epoch(ctx context.Context) int64 {
	var e int64
	if r.binlog() {
		_ = r.admin.QueryRowContext(ctx, "SELECT epoch FROM "+r.t.binlogState()).Scan(&e)
		return e
	}
	_ = r.admin.QueryRowContext(ctx, "SELECT epoch FROM "+r.t.cdcState()+" WHERE slot = $1", r.t.slot()).Scan(&e)
	return e
}

// applyCDC injects the faults that aim at the streaming relay.
func (r *run) applyCDC(ctx context.Context, f Fault, rec *FaultRecord) string {
	slot, epoch := r.waitStreamer(ctx, 3*time.Second, f.Relay%len(r.relays.procs))
	switch f.Kind {
	case Kill:
		// Mid-stream: a relay that took the lease a moment ago is still
		// starting (reading its position, connecting the stream) and holds
		// nothing yet, and with faults two seconds apart every kill after
		// the first would land there.
		slot, epoch = r.waitStreaming(ctx, slot, epoch, time.Second, 3*time.Second)
		rec.StartMs = r.since()
		owner := r.relays.kill(slot, f.For)
		return fmt.Sprintf("SIGKILL %s, the streaming relay (lease epoch %d); restarted after %s", owner, epoch, f.For)
	case Stop:
		// somewhere mid-stream
		sleep(ctx, f.For%(400*time.Millisecond))
		rec.StartMs = r.since()
		owner := r.relays.pause(slot)
		stopped := time.Now()
		// Wake it right after another relay took the lease over (the
		// moment fencing exists for); at the latest after f.For.
		sleep(ctx, r.cfg.Lease)
		takenOver := false
		for time.Since(stopped) < f.For && ctx.Err() == nil {
			if e := r.epoch(ctx); e > epoch && epoch > 0 {
				takenOver = true
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		r.relays.resume(slot)
		note := fmt.Sprintf("SIGSTOP %s, the streaming relay (lease epoch %d), SIGCONT after %s (lease %s)", owner, epoch, time.Since(stopped).Round(10*time.Millisecond), r.cfg.Lease)
		if takenOver {
			note += ", right after another relay took the lease over"
		}
		return note
	}
	return "unknown fault"
}

// slotCheck is the CDC slot check after the final drain, while the relays
// still run: within 30 s the slot's confirmed flush LSN reaches the WAL
// position read once everything was delivered (the source acknowledged
// every transaction and then moved past the idle WAL), and no row is left
// in the outbox table (every delivered row deleted, none undelivered).
func (r *run) slotCheck(ctx context.Context) (string, error) {
	if r.binlog() {
		return r.binlogCheck(ctx)
	}
	var target string
	if err := r.admin.QueryRowContext(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&target); err != nil {
		return "", fmt.Errorf("CDC slot check: %w", err)
	}
	began := time.Now()
	var rows int64
	var confirmed sql.NullString
	var caught bool
	for {
		err := r.admin.QueryRowContext(ctx, "SELECT confirmed_flush_lsn::text, confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1", r.t.slot(), target).Scan(&confirmed, &caught)
		if errors.Is(err, sql.ErrNoRows) {
			return "", fmt.Errorf("CDC slot check: the slot %s does not exist after the final drain", r.t.slot())
		}
		if err == nil {
			err = r.admin.QueryRowContext(ctx, "SELECT count(*) FROM "+r.t.outbox).Scan(&rows)
		}
		if err == nil && caught && rows == 0 {
			return fmt.Sprintf("caught-up(%s>=%s in %s)", confirmed.String, target, time.Since(began).Round(100*time.Millisecond)), nil
		}
		if time.Since(began) > 30*time.Second || ctx.Err() != nil {
			return "", fmt.Errorf("CDC slot check: 30 s after the final drain the slot %s confirmed %s (wanted >= %s) and %d rows remain in %s (want none; error: %v)",
				r.t.slot(), confirmed.String, target, rows, r.t.outbox, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// binlogCheck is the binlog cell's check after the final drain, while the
// relays still run: within 30 s no row is left in the outbox table (every
// delivered row deleted, none undelivered) and a resume position is saved.
func (r *run) binlogCheck(ctx context.Context) (string, error) {
	began := time.Now()
	for {
		var rows int64
		var file string
		var pos int64
		err := r.admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+r.t.outbox).Scan(&rows)
		if err == nil {
			err = r.admin.QueryRowContext(ctx, "SELECT file, pos FROM "+r.t.binlogState()).Scan(&file, &pos)
		}
		if err == nil && rows == 0 && file != "" {
			return fmt.Sprintf("drained(saved %s:%d in %s)", file, pos, time.Since(began).Round(100*time.Millisecond)), nil
		}
		if time.Since(began) > 30*time.Second || ctx.Err() != nil {
			return "", fmt.Errorf("binlog check: 30 s after the final drain %d rows remain in %s (want none) and the saved position is %q (error: %v)", rows, r.t.outbox, file, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
