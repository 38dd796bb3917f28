package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// testBacklog: the bounded-cost summary agrees with what the table holds:
// nothing when empty; claimed events still count as waiting; DEAD ones
// are counted apart; everything delivered leaves nothing waiting.
func (s *suite) testBacklog(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	backlog := backlogOf(t, fx)
	if b := backlog(); b != (store.Backlog{}) {
		t.Fatalf("Backlog of an empty table = %+v, want zero", b)
	}
	for i := range 10 {
		enqueue(t, fx, msg("e", string(rune('a'+i))))
	}
	time.Sleep(20 * time.Millisecond)
	c := claim(t, fx, req(s.lease("backlog"), 4)) // claimed events still wait
	if b := backlog(); b.Pending != 10 || b.Dead != 0 || b.OldestPendingAge < 10*time.Millisecond || b.OldestPendingAge > time.Minute {
		t.Fatalf("Backlog with 10 waiting (4 claimed) = %+v", b)
	}
	var bs []driver.Burial
	for _, e := range c.Events[:2] {
		bs = append(bs, driver.Burial{ID: e.ID, Error: "poison"})
	}
	if err := fx.Store.Bury(t.Context(), driver.BuryParams{Lease: c.Lease, Burials: bs}); err != nil {
		t.Fatal(err)
	}
	if err := fx.Store.Ack(t.Context(), driver.AckParams{Lease: c.Lease, IDs: ids(c.Events[2:])}); err != nil {
		t.Fatal(err)
	}
	if b := backlog(); b.Pending != 6 || b.Dead != 2 {
		t.Fatalf("Backlog after 2 buried and 2 delivered = %+v, want 6 waiting, 2 dead", b)
	}
	if got := len(s.drain(t, fx, "drainer", false)); got != 6 {
		t.Fatalf("drained %d events, want 6", got)
	}
	if b := backlog(); b.Pending != 0 || b.OldestPendingAge != 0 || b.Dead != 2 {
		t.Fatalf("Backlog after draining = %+v, want nothing waiting, 2 dead", b)
	}
}

// testBacklogDeadCap: Backlog counts DEAD events up to store.DeadCap, so
// a scrape's cost stays bounded however many there are; Stats counts
// them all.
func (s *suite) testBacklogDeadCap(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	backlog := backlogOf(t, fx)
	const n = store.DeadCap + 5
	msgs := make([]outbox.Message, 0, 1000)
	for i := range n {
		msgs = append(msgs, msg("dead", fmt.Sprintf("k%d", i)))
		if len(msgs) == cap(msgs) || i == n-1 {
			enqueue(t, fx, msgs...)
			msgs = msgs[:0]
		}
	}
	if _, err := fx.DB.ExecContext(t.Context(), "UPDATE "+fx.Table+" SET status = 'DEAD'"); err != nil {
		t.Fatalf("burying every row: %v", err)
	}
	if b := backlog(); b.Dead != store.DeadCap || b.Pending != 0 {
		t.Fatalf("Backlog with %d DEAD events = %+v, want Dead %d (the cap), nothing waiting", n, b, store.DeadCap)
	}
	st, err := fx.Store.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Dead != n {
		t.Fatalf("Stats with %d DEAD events: Dead %d", n, st.Dead)
	}
}

// backlogOf returns a reader of fx's Backlog that fails the test on an
// error; it skips a store that is not a store.BacklogReader.
func backlogOf(t *testing.T, fx Fixture) func() store.Backlog {
	br, ok := fx.Store.(store.BacklogReader)
	if !ok {
		t.Skip("the store is not a store.BacklogReader")
	}
	return func() store.Backlog {
		t.Helper()
		b, err := br.Backlog(t.Context())
		if err != nil {
			t.Fatalf("Backlog: %v", err)
		}
		return b
	}
}

// backlogSQL is, per database, the SQL of an hour before a row's own
// creation or now (hourAgo, an expression over the row's columns) and of a
// next attempt that never comes (forever): what a plain-SQL producer
// writes to hold a row for good.
func (s *suite) backlogSQL(t *testing.T) (hourAgo, forever string) {
	t.Helper()
	switch name := s.h.Name; {
	case strings.HasPrefix(name, "postgres"):
		return "now() - interval '1 hour'", "'9999-12-31'"
	case strings.HasPrefix(name, "mysql"): // the latest TIMESTAMP
		return "NOW(6) - INTERVAL 1 HOUR", "FROM_UNIXTIME(2147483647)"
	case strings.HasPrefix(name, "sqlite"): // µs; text is after every integer
		return "created_at - 3600000000", "'infinity'"
	}
	t.Skipf("no SQL for %s rows dated an hour ago", s.h.Name)
	return "", ""
}

// testBacklogDue: OldestPendingAge is the age of the oldest row the claim
// may take. A row held for good by its own next_attempt_at, a row held
// behind it and one held behind a DEAD row of its key are waiting but not
// due: they give no age, however old, before a claim met them and after
// (when it parked them); a due row an hour old gives an hour.
func (s *suite) testBacklogDue(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	backlog := backlogOf(t, fx)
	hourAgo, forever := s.backlogSQL(t)
	set := func(label, assign string) {
		t.Helper()
		if _, err := fx.DB.ExecContext(t.Context(), "UPDATE "+fx.Table+" SET "+assign+" WHERE event_type = "+fx.Placeholder(1), label); err != nil {
			t.Fatalf("dating %s: %v", label, err)
		}
	}
	enqueue(t, fx, msg("dead", "d"))
	c := claim(t, fx, req(s.lease("backlog-due"), 1))
	if len(c.Events) != 1 {
		t.Fatalf("claimed %d events, want the one", len(c.Events))
	}
	if err := fx.Store.Bury(t.Context(), driver.BuryParams{Lease: c.Lease, Burials: []driver.Burial{{ID: c.Events[0].ID, Error: "poison"}}}); err != nil {
		t.Fatal(err)
	}
	enqueue(t, fx, msg("held", "h"), msg("behind-held", "h"), msg("behind-dead", "d"))
	set("held", "created_at = "+hourAgo+", next_attempt_at = "+forever)
	set("behind-held", "created_at = "+hourAgo+", next_attempt_at = "+hourAgo)
	set("behind-dead", "created_at = "+hourAgo+", next_attempt_at = "+hourAgo)
	if b := backlog(); b.Pending != 3 || b.Dead != 1 || b.OldestPendingAge > 5*time.Second {
		t.Fatalf("Backlog with only held rows an hour old = %+v, want 3 waiting, 1 dead, no age", b)
	}
	if c := claim(t, fx, req(s.lease("backlog-due"), 10)); len(c.Events) != 0 {
		t.Fatalf("claimed %v behind a held key", labels(c.Events))
	}
	if b := backlog(); b.Pending != 3 || b.Dead != 1 || b.OldestPendingAge > 5*time.Second {
		t.Fatalf("Backlog with only held rows after a claim met them = %+v, want 3 waiting, 1 dead, no age", b)
	}
	enqueue(t, fx, msg("due", ""))
	set("due", "created_at = "+hourAgo+", next_attempt_at = "+hourAgo)
	if b := backlog(); b.Pending != 4 || b.OldestPendingAge < 59*time.Minute || b.OldestPendingAge > 61*time.Minute {
		t.Fatalf("Backlog with a due row an hour old = %+v, want 4 waiting, about an hour", b)
	}
}
