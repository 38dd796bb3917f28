package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// BadRow is a row a careless producer writes with plain SQL that breaks the
// table contract. Each is either refused by the database at INSERT or, once
// claimed, buried DEAD with a reason containing Reason; it never fails a
// claim and holds only its own key.
type BadRow struct {
	Name          string
	Topic         string // "" means "orders"; "-" the empty topic
	Type          string // "" means "OrderPaid"; "-" the empty type
	Headers       string // the headers column's text; "" means the default
	Status        string // "" means the default
	SchemaVersion any    // nil means the default
	// Reason is part of the DEAD reason expected when the database accepts
	// the row.
	Reason string
}

// BadRows are the kinds of bad row the suite (and the relay's bad-input
// test) inserts.
var BadRows = []BadRow{
	{Name: "headers-array", Headers: `[1,2]`, Reason: "headers column is not a JSON object of strings"},
	{Name: "headers-string", Headers: `"x"`, Reason: "headers column is not a JSON object of strings"},
	{Name: "headers-null", Headers: `null`, Reason: "headers column is not a JSON object of strings"},
	{Name: "headers-number-value", Headers: `{"a":1}`, Reason: "header \"a\" is a number"},
	{Name: "headers-not-json", Headers: `{"a":`, Reason: "headers column is not a JSON object of strings"},
	{Name: "headers-not-utf8", Headers: "{\"a\":\"\xff\"}", Reason: "headers column is not valid UTF-8"},
	{Name: "status-unknown", Status: "FOO", Reason: "status"},
	{Name: "status-lower-case", Status: "new", Reason: "status"},
	{Name: "status-trailing-space", Status: "sending ", Reason: "status"},
	{Name: "schema-version-negative", SchemaVersion: -1, Reason: "schema_version is -1"},
	{Name: "schema-version-text", SchemaVersion: "v2", Reason: "schema_version"},
	{Name: "topic-empty", Topic: "-", Reason: "topic is empty"},
	{Name: "type-empty", Type: "-", Reason: "event_type is empty"},
	{Name: "topic-tab", Topic: "orders\tpaid", Reason: "topic has the control character U+0009"},
	{Name: "type-newline", Type: "Order\nPaid", Reason: "event_type has the control character U+000A"},
	{Name: "type-c1-control", Type: "Order\u0085Paid", Reason: "event_type has the control character U+0085"},
	{Name: "key-control", Reason: "event_key has the control character U+001B"},
}

// Key returns the event_key the row is inserted with: its own key, with a
// control character when that is what is wrong with it.
func (b BadRow) Key() string {
	if b.Name == "key-control" {
		return "bad-\x1b-key"
	}
	return "bad-" + b.Name
}

// Insert writes the row with plain SQL (placeholder is the dialect's bind
// parameter) and returns the database's error, if it refused it.
func (b BadRow) Insert(ctx context.Context, db *sql.DB, table string, placeholder func(int) string, payload []byte) error {
	topic, typ := b.Topic, b.Type
	switch topic {
	case "":
		topic = "orders"
	case "-":
		topic = ""
	}
	switch typ {
	case "":
		typ = "OrderPaid"
	case "-":
		typ = ""
	}
	cols := []string{"topic", "event_key", "event_type", "payload"}
	args := []any{topic, b.Key(), typ, payload}
	if b.Headers != "" {
		cols, args = append(cols, "headers"), append(args, b.Headers)
	}
	if b.Status != "" {
		cols, args = append(cols, "status"), append(args, b.Status)
	}
	if b.SchemaVersion != nil {
		cols, args = append(cols, "schema_version"), append(args, b.SchemaVersion)
	}
	marks := make([]string, len(cols))
	for i := range marks {
		marks[i] = placeholder(i + 1)
	}
	_, err := db.ExecContext(ctx, "INSERT INTO "+table+" ("+strings.Join(cols, ", ")+") VALUES ("+strings.Join(marks, ", ")+")", args...)
	return err
}

// InsertAccepted inserts the first of BadRows, in order, that skip does
// not rule out and the database accepts, and returns it; nil when the
// database refused every one.
func InsertAccepted(ctx context.Context, db *sql.DB, table string, placeholder func(int) string, skip func(BadRow) bool) *BadRow {
	for i := range BadRows {
		b := &BadRows[i]
		if (skip == nil || !skip(*b)) && b.Insert(ctx, db, table, placeholder, []byte(`{}`)) == nil {
			return b
		}
	}
	return nil
}

// testBadRows: each kind of bad row amid good ones is refused at INSERT, or
// buried DEAD with its reason by the claim that takes it; the claim never
// fails, the good events of other keys are claimed, the bad row's later
// event waits, and ListDead and Stats show the row.
func (s *suite) testBadRows(t *testing.T) {
	for _, b := range BadRows {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			fx := s.migrated(t, store.Options{})
			ctx := t.Context()
			enqueue(t, fx, msg("before", "good-1"))
			err := b.Insert(ctx, fx.DB, fx.Table, fx.Placeholder, []byte(`{}`))
			if err != nil {
				t.Logf("%s: refused at INSERT: %v", s.h.Name, err)
			}
			// A later event of the bad row's key must wait for it (unless
			// the key itself is what is wrong: any event of it is bad).
			laterOK := !strings.ContainsRune(b.Key(), 0x1b)
			if laterOK {
				enqueue(t, fx, msg("later", b.Key()))
			}
			enqueue(t, fx, msg("after", "good-2"), msg("unkeyed", ""))
			all := s.drain(t, fx, "relay", true)
			if err != nil { // refused: nothing of it is in the table, its key is free
				wantLabelSet(t, "claims after the database refused the bad row", all, "before", "later", "after", "unkeyed")
				return
			}
			waiting := int64(0)
			if laterOK {
				waiting = 1
			}
			wantLabelSet(t, "claims with a bad row in the table (the good rows of other keys flow; the bad row's later event waits)", all, "before", "after", "unkeyed")
			dead, err := fx.Store.ListDead(ctx, store.DeadQuery{})
			if err != nil {
				t.Fatalf("ListDead with a bad row DEAD: %v", err)
			}
			if len(dead) != 1 || dead[0].Key != b.Key() || dead[0].Status != outbox.StatusDead {
				t.Fatalf("ListDead: %d records %v; want the bad row alone, DEAD", len(dead), dead)
			}
			if r := dead[0].LastError; !strings.Contains(r, b.Reason) || !strings.Contains(r, driver.ErrBadRow.Error()) {
				t.Errorf("the bad row's last_error is %q; want it to say %q (and %q)", r, b.Reason, driver.ErrBadRow)
			}
			if strings.ContainsAny(dead[0].LastError, "\n\r") {
				t.Errorf("the bad row's last_error spans lines: %q", dead[0].LastError)
			}
			if st := stats(t, fx); st.Dead != 1 || st.BlockedKeys != 1 || st.New != waiting {
				t.Errorf("Stats with the bad row DEAD and its later event held: %+v; want Dead 1, BlockedKeys 1, New %d", st, waiting)
			}
			if laterOK {
				// Without HoldDeadKeys the later event moves on, as behind any DEAD event.
				moved := s.drain(t, fx, "relay-move-on", false)
				wantLabels(t, "claims with HoldDeadKeys=false", moved, "later")
			}
		})
	}
}

// testBadRowsInOneClaim: bad rows in the middle of a claim are buried by
// that claim, which returns the good ones (in id order) and releases the
// later events of the bad rows' keys, which stay held.
func (s *suite) testBadRowsInOneClaim(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	ctx := t.Context()
	var want []string
	accepted := 0
	for i, b := range BadRows {
		good := fmt.Sprintf("good-%d", i)
		enqueue(t, fx, msg(good, good))
		want = append(want, good)
		refused := b.Insert(ctx, fx.DB, fx.Table, fx.Placeholder, []byte(`{}`)) != nil
		if !refused {
			accepted++
		}
		if !strings.ContainsRune(b.Key(), 0x1b) {
			enqueue(t, fx, msg("later-"+b.Name, b.Key()))
			if refused { // nothing holds its key
				want = append(want, "later-"+b.Name)
			}
		}
	}
	enqueue(t, fx, msg("last", ""))
	want = append(want, "last")
	c := claim(t, fx, req(s.lease("relay"), 1000))
	wantLabels(t, "one claim over every kind of bad row", c.Events, want...)
	ack(t, fx, c)
	if again := s.drain(t, fx, "relay-2", true); len(again) != 0 {
		t.Errorf("after the bad rows were buried, claims returned %v; want nothing (their later events are held)", labels(again))
	}
	if st := stats(t, fx); st.Dead != int64(accepted) {
		t.Errorf("Stats after one claim over %d accepted bad rows: %+v; want Dead %d", accepted, st, accepted)
	}
}

// testBadRowBesideHeldKey: a claim whose only taken row is a bad one,
// buried, while it parks a held key's row, reports the burial. A store
// that claims again after parking (so that a held backlog does not look
// like "caught up") must not drop the first round's burials with it: the
// relay would never log or count that DEAD event.
func (s *suite) testBadRowBesideHeldKey(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	ctx := t.Context()
	enqueue(t, fx, msg("k1", "K"))
	a := claim(t, fx, req(s.lease("relay-a"), 1))
	wantLabels(t, "Claim(Limit 1)", a.Events, "k1")
	if err := fx.Store.Retry(ctx, driver.RetryParams{Lease: a.Lease, Retries: []driver.Retry{{ID: a.Events[0].ID, Delay: time.Hour, Error: "broker down"}}}); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	enqueue(t, fx, msg("k2", "K")) // held behind k1's retry
	bad := InsertAccepted(ctx, fx.DB, fx.Table, fx.Placeholder, func(b BadRow) bool { return b.Key() == "K" })
	if bad == nil {
		t.Fatalf("the database refused every kind of bad row at INSERT")
	}
	c := claim(t, fx, req(s.lease("relay-b"), 10))
	if len(c.Events) != 0 || len(c.Buried) != 1 || !strings.Contains(c.Buried[0].Error, bad.Reason) {
		t.Fatalf("claim over k2 (held behind k1's retry) and one bad row (%s): events %v, buried %+v; want no event and the bad row buried with a reason saying %q", bad.Name, labels(c.Events), c.Buried, bad.Reason)
	}
}
