package storetest

import (
	"strings"
	"testing"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
)

// insertLeaseless writes, with plain SQL, a row of key whose status is
// SENDING and whose lease columns keep their defaults (no owner, no
// lease_until): what a producer that copies a row or sets the status by
// hand leaves behind. It returns the database's error, if it refused it.
func insertLeaseless(t *testing.T, fx Fixture, label, key string) error {
	t.Helper()
	p := fx.Placeholder
	_, err := fx.DB.ExecContext(t.Context(), "INSERT INTO "+fx.Table+" (topic, event_key, event_type, payload, status) VALUES ("+
		strings.Join([]string{p(1), p(2), p(3), p(4), p(5)}, ", ")+")",
		"orders", key, label, []byte(`{"label":"`+label+`"}`), "SENDING")
	return err
}

// testSendingWithoutLease: a plain-SQL row that says SENDING with no lease
// is an expired lease. It is refused at INSERT, or it is counted as an
// expired lease, claimed, and delivered ahead of its key's later event;
// it never holds its key forever nor lets the later event pass it.
func (s *suite) testSendingWithoutLease(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	drain := func() []outbox.Event { return s.drain(t, fx, "relay", true) }
	enqueue(t, fx, msg("first", "k"))
	err := insertLeaseless(t, fx, "stuck", "k")
	enqueue(t, fx, msg("after", "k"), msg("other", "k2"))
	if err != nil {
		t.Logf("%s: a SENDING row without a lease is refused at INSERT: %v", s.h.Name, err)
		all := drain()
		wantLabelSet(t, "claims after the database refused the leaseless row", all, "first", "after", "other")
		wantLabels(t, "the claims of key k after the database refused the leaseless row", withKey(all, "k"), "first", "after")
		return
	}
	st := stats(t, fx)
	if st.Sending != 1 || st.ExpiredLeases != 1 || st.New != 3 {
		t.Errorf("Stats with a plain-SQL SENDING row without a lease: %+v; want Sending 1, ExpiredLeases 1 (it is an expired lease), New 3", st)
	}
	all := drain()
	wantLabelSet(t, "claims with a plain-SQL SENDING row without a lease in the table (the row is an expired lease: it is claimed)", all, "first", "stuck", "after", "other")
	wantLabels(t, "the claims of key k, whose middle row is a plain-SQL SENDING row without a lease (it must go before the key's later event)", withKey(all, "k"), "first", "stuck", "after")
	if st := stats(t, fx); st.Pending() != 0 || st.ExpiredLeases != 0 || st.Dead != 0 {
		t.Errorf("Stats after the drain: %+v; want nothing pending, no expired lease, nothing dead", st)
	}
}
