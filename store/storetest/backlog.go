package storetest

import (
	"testing"
	"time"

	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// testBacklog: the bounded-cost summary agrees with what the table holds:
// nothing when empty; claimed events still count as waiting; DEAD ones
// are counted apart; everything delivered leaves nothing waiting.
func (s *suite) testBacklog(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	br, ok := fx.Store.(store.BacklogReader)
	if !ok {
		t.Skip("the store is not a store.BacklogReader")
	}
	backlog := func() store.Backlog {
		t.Helper()
		b, err := br.Backlog(t.Context())
		if err != nil {
			t.Fatalf("Backlog: %v", err)
		}
		return b
	}
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
