package storetest

import (
	"fmt"
	"strings"
	"testing"

	outbox "github.com/outbox-go/outbox"
)

// testOwnedDeadKeyStatistics: one poison key's many DEAD rows, the only
// rows the table held when the database last took its statistics (as
// after a night in which a consumer refused every event of one key, while
// the others were delivered and deleted), slow no claim of other keys. On
// PostgreSQL such statistics made each candidate's "is my key DEAD?"
// probe walk the primary key below it, every DEAD row for each candidate:
// a claim of 1,000 events read 10 million rows and took 1.3 s. The claim
// reads a few rows per event (Harness.ClaimReads) and takes every
// event of the other keys.
func (s *suite) testOwnedDeadKeyStatistics(t *testing.T) {
	fx, o := s.ownedFixture(t)
	const dead, others = 10_000, 1000
	tx, err := fx.DB.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := fx.Placeholder
	insert := "INSERT INTO " + fx.Table + " (topic, event_key, event_type, payload, status, attempts, last_error) VALUES (" +
		strings.Join([]string{p(1), p(2), p(3), p(4), p(5), p(6), p(7)}, ", ") + ")"
	for range dead {
		if _, err := tx.ExecContext(t.Context(), insert, "orders", "poison", "dead", []byte(`{}`), "DEAD", 5, "the consumer refused it"); err != nil {
			_ = tx.Rollback()
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	analyze := "ANALYZE " + fx.Table
	if fx.Placeholder(1) == "?" && !strings.Contains(fx.Table, `"`) {
		analyze = "ANALYZE TABLE " + fx.Table // MySQL/MariaDB
	}
	if _, err := fx.DB.ExecContext(t.Context(), analyze); err != nil {
		t.Fatalf("%s: %v", analyze, err)
	}
	batch := make([]outbox.Message, others)
	for i := range batch {
		batch[i] = msg(fmt.Sprintf("e%04d", i), fmt.Sprintf("key-%d", i))
	}
	enqueue(t, fx, batch...)
	own := sole(t, o, "a", true)
	req := s.ownedReq("a", claimable(own), others, true)
	if s.h.ClaimReads == nil {
		c := claimOwned(t, o, req)
		if len(c.Events) != others {
			t.Fatalf("the claim beside %d DEAD rows of one key returned %d events; want %d", dead, len(c.Events), others)
		}
		t.Logf("%s: Harness.ClaimReads is not set: the claim's reads are not checked", s.h.Name)
		return
	}
	c, reads, err := s.h.ClaimReads(t.Context(), fx.Store, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Events) != others {
		t.Fatalf("the claim beside %d DEAD rows of one key returned %d events; want %d", dead, len(c.Events), others)
	}
	// a few probes per event and a pass over the DEAD rows at most, not
	// the DEAD rows once per event
	if bound := int64(10*others + 2*dead); reads > bound {
		t.Fatalf("the claim of %d events beside %d DEAD rows of one key read %d rows; want at most %d (a few probes per event, not the DEAD rows for each)", others, dead, reads, bound)
	}
	t.Logf("%s: the claim of %d events beside %d DEAD rows of one key read %d rows", s.h.Name, others, dead, reads)
}
