package torture

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// inject runs the plan, one fault after another, each not before its time
// (counted from r.faultsFrom).
func (r *run) inject(ctx context.Context, plan []Fault) {
	for _, f := range plan {
		if wait := r.faultsFrom + f.At - time.Since(r.start); wait > 0 {
			sleep(ctx, wait)
		}
		if ctx.Err() != nil {
			return
		}
		rec := FaultRecord{Fault: f, StartMs: r.since()}
		rec.Note = r.apply(ctx, f, &rec)
		rec.HealMs = r.since()
		r.logf("%s: %s", f, rec.Note)
		r.mu.Lock()
		r.faults = append(r.faults, rec)
		r.mu.Unlock()
	}
}

// apply injects f and heals it; it returns a note for the history.
func (r *run) apply(ctx context.Context, f Fault, rec *FaultRecord) string {
	slot := f.Relay % len(r.relays.procs)
	if r.cdc() && (f.Kind == Kill || f.Kind == Stop) {
		return r.applyCDC(ctx, f, rec)
	}
	switch f.Kind {
	case Kill:
		held := r.waitHolding(ctx, slot, time.Second)
		rec.StartMs = r.since()
		owner := r.relays.kill(slot, f.For)
		return fmt.Sprintf("SIGKILL %s holding %d claimed events; restarted after %s", owner, len(held), f.For)
	case Leave:
		held := r.waitHolding(ctx, slot, time.Second)
		rec.StartMs = r.since()
		owner, err := r.relays.leave(slot, f.For)
		if err != nil {
			return err.Error() // counted among the relays' crashes
		}
		return fmt.Sprintf("SIGTERM %s holding %d claimed events (it settled them and left); a new relay joined after %s", owner, len(held), f.For)
	case Stop:
		owner := r.relays.owner(slot)
		ids := r.waitHolding(ctx, slot, time.Second)
		// Somewhere mid-batch, not always right after the claim: a wave
		// may have been confirmed and not yet acknowledged.
		sleep(ctx, f.For%(400*time.Millisecond))
		if len(ids) > 0 && r.stillHeld(ctx, owner, ids) == 0 {
			// that batch is done already: stop the relay in its next one
			ids = r.waitHolding(ctx, slot, time.Second)
		}
		rec.StartMs = r.since()
		r.relays.pause(slot)
		stopped := time.Now()
		// Wake it right after another relay took its claims over, the
		// moment fencing exists for; at the latest after f.For.
		sleep(ctx, r.cfg.Lease+250*time.Millisecond)
		takenOver := false
		for time.Since(stopped) < f.For && ctx.Err() == nil {
			if len(ids) > 0 && r.stillHeld(ctx, owner, ids) < len(ids) {
				takenOver = true
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		r.relays.resume(slot)
		note := fmt.Sprintf("SIGSTOP %s holding %d claimed events, SIGCONT after %s (lease %s)", owner, len(ids), time.Since(stopped).Round(10*time.Millisecond), r.cfg.Lease)
		if takenOver {
			note += ", right after another relay took its claims over"
		}
		return note
	case PGTerminate:
		var n int
		err := r.admin.QueryRowContext(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE left(application_name, $1) = $2 OR application_name = $3",
			len(r.t.outbox)+7, r.t.outbox+"-relay-", r.t.outbox+"-writer").Scan(&n)
		if err != nil {
			return "pg_terminate_backend failed: " + err.Error()
		}
		return fmt.Sprintf("terminated %d relay and writer backends", n)
	case PGRestart:
		return pgRestart()
	case DBReset:
		return fmt.Sprintf("reset %d relay↔database connections", r.dbP.ResetAll())
	case DBLatency:
		r.dbP.SetLatency(f.Latency)
		sleep(ctx, f.For)
		r.dbP.SetLatency(0)
		return fmt.Sprintf("relay↔database latency %s for %s", f.Latency, f.For)
	case CommitTimeout:
		r.writerP.Pause()
		sleep(ctx, f.For)
		r.writerP.Resume()
		return fmt.Sprintf("writer↔database link paused %s (writer deadline %s)", f.For, r.cfg.WriterTimeout)
	case BrokerReset:
		before := r.brokerP.Resets()
		r.brokerP.ResetAfter([]byte("PUB "))
		sleep(ctx, f.For)
		r.brokerP.ResetAfter(nil)
		return fmt.Sprintf("%d relay↔broker connections reset right after a publish", r.brokerP.Resets()-before)
	case BrokerBlackhole:
		r.brokerP.Pause()
		sleep(ctx, f.For)
		n := r.brokerP.ResetAll()
		r.brokerP.Resume()
		return fmt.Sprintf("relay↔broker link silent for %s, then %d connections reset", f.For, n)
	case BrokerLatency:
		r.brokerP.SetLatency(f.Latency)
		sleep(ctx, f.For)
		r.brokerP.SetLatency(r.cfg.LinkLatency)
		return fmt.Sprintf("relay↔broker latency %s for %s", f.Latency, f.For)
	case BrokerRestart:
		if err := r.tr.Restart(f.For); err != nil {
			return "broker restart failed: " + err.Error()
		}
		return fmt.Sprintf("broker down for %s, restarted", f.For)
	}
	return "unknown fault"
}

// waitHolding waits up to d for the relay in slot to hold claimed events,
// so that a kill or stop lands mid-batch, and returns their ids.
func (r *run) waitHolding(ctx context.Context, slot int, d time.Duration) []int64 {
	owner := r.relays.owner(slot)
	until := time.Now().Add(d)
	for {
		if ids, err := r.held(ctx, owner); err == nil && len(ids) > 0 {
			return ids
		}
		if time.Now().After(until) || ctx.Err() != nil {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// held returns the ids of the events owner has claimed. pgstore records a
// claim as a row of <table>_claims with the ids as ranges (the rows keep
// status NEW); the other stores write SENDING and the owner into the rows.
func (r *run) held(ctx context.Context, owner string) ([]int64, error) {
	q := "SELECT id FROM " + r.t.outbox + " WHERE status = 'SENDING' AND lease_owner = ?"
	if r.t.dialect == "postgres" {
		q = "SELECT x FROM " + r.t.outbox + "_claims c, unnest(c.ids) s, generate_series(lower(s), upper(s) - 1) x WHERE c.owner = ?"
	}
	return queryIDs(ctx, r.admin, r.t.rebind(q), owner)
}

// stillHeld counts the ids that owner still holds.
func (r *run) stillHeld(ctx context.Context, owner string, ids []int64) int {
	now, err := r.held(ctx, owner)
	if err != nil {
		return len(ids)
	}
	set := make(map[int64]bool, len(now))
	for _, id := range now {
		set[id] = true
	}
	n := 0
	for _, id := range ids {
		if set[id] {
			n++
		}
	}
	return n
}

func queryIDs(ctx context.Context, db *sql.DB, q string, args ...any) ([]int64, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// pgRestart restarts the local PostgreSQL cluster.
func pgRestart() string {
	entries, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(entries) == 0 {
		return "pg_ctlcluster restart skipped: no cluster under /etc/postgresql"
	}
	version := entries[0].Name()
	out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("pg_ctlcluster %s main restart failed: %v: %s", version, err, strings.TrimSpace(string(out)))
	}
	return "pg_ctlcluster " + version + " main restart"
}
