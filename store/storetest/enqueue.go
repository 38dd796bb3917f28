package storetest

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// testTableContract: a producer in any language enqueues with a plain
// INSERT naming four columns; every other column has a default.
func (s *suite) testTableContract(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	ctx := t.Context()
	for _, key := range []string{"order-42", "order-43"} {
		q := fmt.Sprintf(`INSERT INTO %s (topic, event_key, event_type, payload) VALUES ('orders', '%s', 'OrderPaid', '{"id":42}')`, fx.Table, key)
		if _, err := fx.DB.ExecContext(ctx, q); err != nil {
			t.Fatalf("the documented raw INSERT failed (every column but topic, event_key, event_type, payload needs a default): %v\n%s", err, q)
		}
	}
	var (
		id                int64
		eventID, status   sql.NullString
		attempts, version int
		contentType       sql.NullString
	)
	q := fmt.Sprintf(`SELECT id, event_id, status, attempts, schema_version, content_type FROM %s WHERE event_key = %s`, fx.Table, fx.Placeholder(1))
	if err := fx.DB.QueryRowContext(ctx, q, "order-42").Scan(&id, &eventID, &status, &attempts, &version, &contentType); err != nil {
		t.Fatalf("reading the contract columns back: %v\n%s", err, q)
	}
	if status.String != string(outbox.StatusNew) || attempts != 0 || version != 1 || contentType.String != outbox.DefaultContentType {
		t.Errorf("defaults of a raw INSERT: status %q, attempts %d, schema_version %d, content_type %q; want NEW, 0, 1, %q",
			status.String, attempts, version, contentType.String, outbox.DefaultContentType)
	}
	if _, err := uuid.Parse(eventID.String); err != nil || len(eventID.String) != 36 {
		t.Errorf("event_id defaulted by the database is %q; want a 36-character UUID", eventID.String)
	}
	rec := get(t, fx, id)
	if rec.Status != outbox.StatusNew || rec.LeaseOwner != "" || !rec.LeaseUntil.IsZero() {
		t.Errorf("Get of a fresh raw row: %s; want status NEW, no lease owner, zero LeaseUntil", describe(rec))
	}
	before := time.Now()
	c := claim(t, fx, req(s.lease("relay"), 10))
	if len(c.Events) != 2 {
		t.Fatalf("Claim after two raw INSERTs returned %d events; want 2", len(c.Events))
	}
	ev := c.Events[0]
	if ev.ID != id {
		t.Errorf("first claimed event has id %d; want %d (the first insert)", ev.ID, id)
	}
	if ev.Topic != "orders" || ev.Key != "order-42" || ev.Type != "OrderPaid" {
		t.Errorf("raw row claimed as topic %q key %q type %q; want orders, order-42, OrderPaid", ev.Topic, ev.Key, ev.Type)
	}
	if len(ev.EventID) != 36 || ev.EventID != eventID.String {
		t.Errorf("claimed EventID %q; want the 36-character UUID %q stored in event_id", ev.EventID, eventID.String)
	}
	if c.Events[1].EventID == ev.EventID {
		t.Errorf("two raw INSERTs got the same default event_id %q; it must be unique", ev.EventID)
	}
	if ev.SchemaVersion != 1 || ev.ContentType != outbox.DefaultContentType || ev.Attempts != 0 {
		t.Errorf("raw row claimed with SchemaVersion %d, ContentType %q, Attempts %d; want 1, %q, 0", ev.SchemaVersion, ev.ContentType, ev.Attempts, outbox.DefaultContentType)
	}
	if string(ev.Payload) != `{"id":42}` {
		t.Errorf("raw row's payload claimed as %q; want the bytes {\"id\":42}", ev.Payload)
	}
	if len(ev.Headers) != 0 {
		t.Errorf("raw row without headers claimed with headers %v; want none", ev.Headers)
	}
	if !near(ev.CreatedAt, before, time.Minute) {
		t.Errorf("CreatedAt %v is not near now (%v): check the time zone handling", ev.CreatedAt, before)
	}
	if err := fx.DB.QueryRowContext(ctx, fmt.Sprintf(`SELECT status FROM %s WHERE id = %s`, fx.Table, fx.Placeholder(1)), id).Scan(&status); err != nil {
		t.Fatalf("reading status: %v", err)
	}
	want := outbox.StatusSending
	if s.h.ClaimedStatus != "" {
		want = s.h.ClaimedStatus
	}
	if status.String != string(want) {
		t.Errorf("status column of a claimed row is %q; want %s", status.String, want)
	}
	if rec := get(t, fx, id); rec.Status != outbox.StatusSending {
		t.Errorf("Get of a claimed row: status %q; want SENDING", rec.Status)
	}
}

func (s *suite) testEnqueueTxCommit(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	tx, err := fx.DB.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	if err := fx.Store.EnqueueTx(t.Context(), tx, msg("in-tx", "order-1"), msg("in-tx-2", "")); err != nil {
		t.Fatalf("EnqueueTx: %v", err)
	}
	if s.h.SingleWriter {
		t.Log("SingleWriter: not claiming beside the open transaction")
	} else {
		c := claim(t, fx, req(s.lease("relay"), 10))
		wantLabels(t, "claim while the enqueueing transaction is still open (uncommitted events must be invisible)", c.Events)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	c := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "claim after commit", c.Events, "in-tx", "in-tx-2")
}

func (s *suite) testEnqueueTxRollback(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	tx, err := fx.DB.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fx.Store.EnqueueTx(t.Context(), tx, msg("rolled-back", "order-1")); err != nil {
		t.Fatalf("EnqueueTx: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	c := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "claim after rollback (a rolled-back event never existed)", c.Events)
	if st := stats(t, fx); st.Pending() != 0 {
		t.Errorf("Stats after rollback: %+v; want nothing pending", st)
	}
}

// testEnqueueTxValidation: a validation error leaves the caller's
// transaction untouched and usable, and writes nothing of its batch.
func (s *suite) testEnqueueTxValidation(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	tx, err := fx.DB.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	err = fx.Store.EnqueueTx(t.Context(), tx, msg("valid-in-bad-batch", ""), outbox.Message{Payload: []byte("{}")})
	if !errors.Is(err, outbox.ErrEmptyTopic) || !errors.Is(err, outbox.ErrInvalidMessage) {
		t.Fatalf("EnqueueTx with an empty topic: %v; want an error matching outbox.ErrEmptyTopic and outbox.ErrInvalidMessage", err)
	}
	big := msg("too-big", "")
	big.Payload = make([]byte, outbox.DefaultMaxPayload+1)
	if err := fx.Store.EnqueueTx(t.Context(), tx, big); !errors.Is(err, outbox.ErrPayloadTooLarge) {
		t.Fatalf("EnqueueTx with a payload of MaxPayload+1 bytes: %v; want outbox.ErrPayloadTooLarge", err)
	}
	if err := fx.Store.EnqueueTx(t.Context(), tx, msg("after-error", "")); err != nil {
		t.Fatalf("EnqueueTx in the same transaction after a validation error: %v (the transaction must stay usable)", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit after a validation error: %v (the transaction must stay usable)", err)
	}
	c := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "claim after commit (nothing of a refused batch may be written)", c.Events, "after-error")
}

// testEnqueueTxExecers: EnqueueTx also takes *sql.DB and *sql.Conn.
func (s *suite) testEnqueueTxExecers(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	if err := fx.Store.EnqueueTx(t.Context(), fx.DB, msg("via-db", "")); err != nil {
		t.Fatalf("EnqueueTx with a *sql.DB: %v", err)
	}
	conn, err := fx.DB.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := fx.Store.EnqueueTx(t.Context(), conn, msg("via-conn", "")); err != nil {
		t.Fatalf("EnqueueTx with a *sql.Conn: %v", err)
	}
	_ = conn.Close()
	c := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "claim after EnqueueTx on *sql.DB and *sql.Conn", c.Events, "via-db", "via-conn")
}

// testOutOfOrderCommit: A enqueues first (lower id) but commits after B; B
// is claimed and acked first, and A is not skipped.
func (s *suite) testOutOfOrderCommit(t *testing.T, keyA, keyB string) {
	if s.h.SingleWriter {
		t.Skip("SingleWriter: two writing transactions cannot be open at once")
	}
	fx := s.migrated(t, store.Options{})
	ctx := t.Context()
	txA, err := fx.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = txA.Rollback() })
	if err := fx.Store.EnqueueTx(ctx, txA, msg("A", keyA)); err != nil {
		t.Fatalf("EnqueueTx A: %v", err)
	}
	txB, err := fx.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = txB.Rollback() })
	if err := fx.Store.EnqueueTx(ctx, txB, msg("B", keyB)); err != nil {
		t.Fatalf("EnqueueTx B: %v", err)
	}
	if err := txB.Commit(); err != nil {
		t.Fatalf("commit B: %v", err)
	}
	cB := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "claim after B committed and A still open", cB.Events, "B")
	ack(t, fx, cB)
	if err := txA.Commit(); err != nil {
		t.Fatalf("commit A: %v", err)
	}
	cA := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "claim after A committed later than B (an event committed out of id order must not be skipped)", cA.Events, "A")
	if cA.Events[0].ID > cB.Events[0].ID {
		t.Logf("note: A got id %d above B's %d, so ids were not assigned at insert; the scenario did not commit out of id order", cA.Events[0].ID, cB.Events[0].ID)
	}
	ack(t, fx, cA)
}

// testBatch: 1,000 messages in one Enqueue come back in input order, with
// the given EventIDs kept and UUIDv7s for the rest; a batch is atomic.
func (s *suite) testBatch(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	const n = 1000
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		m := outbox.Message{
			Topic:   "topic-" + strconv.Itoa(i%5),
			Type:    fmt.Sprintf("e%04d", i),
			Payload: []byte(strconv.Itoa(i)),
		}
		if i%4 != 0 {
			m.Key = "order-" + strconv.Itoa(i%7)
		}
		if i%3 == 0 {
			m.EventID = uuid.NewString() // a v4: given ids are kept as they are
		}
		msgs[i] = m
	}
	enqueue(t, fx, msgs...)

	small := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "Claim(Limit 10) of the batch (the first 10 in id order, several of one key included)", small.Events, "e0000", "e0001", "e0002", "e0003", "e0004", "e0005", "e0006", "e0007", "e0008", "e0009")
	if err := fx.Store.Release(t.Context(), driver.ReleaseParams{Lease: small.Lease, IDs: ids(small.Events)}); err != nil {
		t.Fatalf("Release: %v", err)
	}

	c := claim(t, fx, req(s.lease("relay"), n))
	if len(c.Events) != n {
		t.Fatalf("Claim(Limit %d) returned %d of %d ready events; a claim must take every ready event up to Limit in one batch, several of one key included", n, len(c.Events), n)
	}
	seen := make(map[string]bool, n)
	for i, ev := range c.Events {
		m := msgs[i]
		if ev.Type != m.Type || ev.Topic != m.Topic || ev.Key != m.Key || string(ev.Payload) != string(m.Payload) {
			t.Fatalf("event %d in id order is {type %q topic %q key %q payload %q}; want input message %d {type %q topic %q key %q payload %q} (ids must follow input order)",
				i, ev.Type, ev.Topic, ev.Key, ev.Payload, i, m.Type, m.Topic, m.Key, m.Payload)
		}
		if m.EventID != "" && ev.EventID != m.EventID {
			t.Fatalf("message %d was given EventID %s and came back with %s; given ids must be kept", i, m.EventID, ev.EventID)
		}
		if m.EventID == "" {
			u, err := uuid.Parse(ev.EventID)
			if err != nil || u.Version() != 7 {
				t.Fatalf("message %d had no EventID and got %q; want a generated UUIDv7", i, ev.EventID)
			}
		}
		if seen[ev.EventID] {
			t.Fatalf("EventID %s appears twice in the batch", ev.EventID)
		}
		seen[ev.EventID] = true
	}

	// Atomicity: a duplicate EventID (unique column) fails the whole batch.
	dup := uuid.NewString()
	a, b := msg("dup-1", ""), msg("dup-2", "")
	a.EventID, b.EventID = dup, dup
	if err := fx.Store.Enqueue(t.Context(), msg("dup-0", ""), a, b); err == nil {
		t.Errorf("Enqueue of a batch with one EventID twice succeeded; event_id must be unique")
	}
	existing := msg("dup-existing", "")
	existing.EventID = msgs[0].EventID
	if err := fx.Store.Enqueue(t.Context(), existing); err == nil {
		t.Errorf("Enqueue with the EventID of a stored event succeeded; event_id must be unique")
	}
	ack(t, fx, c)
	rest := claim(t, fx, req(s.lease("relay"), n))
	wantLabels(t, "claim after the refused batches (Enqueue is one transaction: nothing of a failed batch may remain)", rest.Events)
	if st := stats(t, fx); st.Pending() != 0 {
		t.Errorf("Stats after acking the whole batch: %+v; want nothing pending", st)
	}
}

// testPayloads: payloads round-trip byte for byte, through Claim and Get.
func (s *suite) testPayloads(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	maxed := make([]byte, outbox.DefaultMaxPayload)
	for i := range maxed {
		maxed[i] = byte(i*7 + i>>8)
	}
	cases := []struct {
		label, contentType string
		payload            []byte
	}{
		{"unicode", "text/plain; charset=utf-8", []byte("订单已支付 ✓ 🚀 مرحبا بالعالم שלום こんにちは \u200f\u202e end")},
		{"json", "", []byte(`{"id":42,"note":"emoji 🎉, quote \" backslash \\ and \u0000 escaped NUL"}`)},
		{"all-bytes", "application/octet-stream", all},
		{"nul-only", "application/octet-stream", []byte{0, 0, 0}},
		{"invalid-utf8", "application/octet-stream", []byte{0xff, 0xfe, 0xc3, 0x28, 0x80}},
		{"empty", "", []byte{}},
		{"nil", "", nil},
		{"max", "application/octet-stream", maxed},
	}
	want := map[string][]byte{}
	for _, tc := range cases {
		m := msg(tc.label, "")
		m.Payload, m.ContentType = tc.payload, tc.contentType
		enqueue(t, fx, m) // one by one: the largest alone is 1 MiB
		want[tc.label] = tc.payload
	}
	c := claim(t, fx, req(s.lease("relay"), 100))
	if len(c.Events) != len(cases) {
		t.Fatalf("claimed %d events; want %d", len(c.Events), len(cases))
	}
	for _, ev := range c.Events {
		if !bytes.Equal(ev.Payload, want[ev.Type]) {
			t.Errorf("payload %q came back changed through Claim: %s", ev.Type, diffBytes(ev.Payload, want[ev.Type]))
		}
		rec := get(t, fx, ev.ID)
		if !bytes.Equal(rec.Payload, want[ev.Type]) {
			t.Errorf("payload %q came back changed through Get: %s", ev.Type, diffBytes(rec.Payload, want[ev.Type]))
		}
	}
}

func diffBytes(got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d bytes, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at byte %d: %#02x, want %#02x", i, got[i], want[i])
		}
	}
	return "equal"
}

// testPayloadTooLarge: MaxPayload+1 bytes is refused and nothing written,
// also when a valid message precedes it in the batch.
func (s *suite) testPayloadTooLarge(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	big := msg("too-big", "")
	big.Payload = make([]byte, outbox.DefaultMaxPayload+1)
	if err := fx.Store.Enqueue(t.Context(), msg("fine", ""), big); !errors.Is(err, outbox.ErrPayloadTooLarge) {
		t.Fatalf("Enqueue with a payload of 1 MiB + 1 bytes: %v; want an error matching outbox.ErrPayloadTooLarge", err)
	}
	if st := stats(t, fx); st.Pending() != 0 {
		t.Errorf("Stats after a refused Enqueue: %+v; want nothing written", st)
	}
	c := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "claim after a refused Enqueue", c.Events)
}

// testMaxPayloadOption: Options.MaxPayload is honoured.
func (s *suite) testMaxPayloadOption(t *testing.T) {
	fx := s.migrated(t, store.Options{MaxPayload: 100})
	ok := msg("exactly-100", "")
	ok.Payload = bytes.Repeat([]byte("a"), 100)
	enqueue(t, fx, ok)
	bad := msg("101", "")
	bad.Payload = bytes.Repeat([]byte("a"), 101)
	if err := fx.Store.Enqueue(t.Context(), bad); !errors.Is(err, outbox.ErrPayloadTooLarge) {
		t.Fatalf("Enqueue of 101 bytes with Options.MaxPayload 100: %v; want outbox.ErrPayloadTooLarge", err)
	}
	c := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "claim with MaxPayload 100", c.Events, "exactly-100")
}

// testFields: every Message field round-trips.
func (s *suite) testFields(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	longKey := strings.Repeat("键", 200) + strings.Repeat("🔑", 55) // 255 characters, 820 bytes
	full := outbox.Message{
		EventID:       outbox.NewEventID(),
		Topic:         "订单.paid",
		Key:           longKey,
		Type:          "OrderPaid",
		AggregateType: "Order",
		SchemaVersion: 3,
		Payload:       []byte(`{"id":42}`),
		ContentType:   "application/vnd.orders+json; version=3",
		Headers: map[string]string{
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"tenant":      "租户-7 🚀",
			"quoted":      `say "hi" \ <b>&</b>`,
			"empty":       "",
		},
	}
	bare := outbox.Message{Topic: "t", Type: "bare"}
	enqueue(t, fx, full, bare)
	tooLong := msg("too-long-key", longKey+"k")
	if err := fx.Store.Enqueue(t.Context(), tooLong); !errors.Is(err, outbox.ErrFieldTooLong) {
		t.Errorf("Enqueue with a 256-character key: %v; want outbox.ErrFieldTooLong", err)
	}
	c := claim(t, fx, req(s.lease("relay"), 10))
	if len(c.Events) != 2 {
		t.Fatalf("claimed %d events; want 2", len(c.Events))
	}
	check := func(via string, ev outbox.Event) {
		t.Helper()
		if ev.EventID != full.EventID || ev.Topic != full.Topic || ev.Key != full.Key || ev.Type != full.Type ||
			ev.AggregateType != full.AggregateType || ev.SchemaVersion != full.SchemaVersion || ev.ContentType != full.ContentType {
			t.Errorf("through %s: got {EventID %s Topic %q Key %q (%d chars) Type %q AggregateType %q SchemaVersion %d ContentType %q}; want {%s %q %q (255 chars) %q %q %d %q}",
				via, ev.EventID, ev.Topic, ev.Key, len([]rune(ev.Key)), ev.Type, ev.AggregateType, ev.SchemaVersion, ev.ContentType,
				full.EventID, full.Topic, full.Key, full.Type, full.AggregateType, full.SchemaVersion, full.ContentType)
		}
		if !maps.Equal(ev.Headers, full.Headers) {
			t.Errorf("through %s: headers %q; want %q", via, ev.Headers, full.Headers)
		}
	}
	check("Claim", c.Events[0])
	check("Get", get(t, fx, c.Events[0].ID).Event)
	b := c.Events[1]
	if b.Type != "bare" || b.Key != "" || b.AggregateType != "" || b.SchemaVersion != 1 || b.ContentType != outbox.DefaultContentType || len(b.Headers) != 0 || len(b.Payload) != 0 {
		t.Errorf("a message with only Topic and Type came back as %+v; want key \"\", SchemaVersion 1, ContentType %q, no headers, empty payload", b.Message, outbox.DefaultContentType)
	}
}

// testNotifier: a store offering driver.Notifier signals soon after a commit.
func (s *suite) testNotifier(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	n, ok := fx.Store.(driver.Notifier)
	if !ok {
		t.Skipf("%s store does not implement driver.Notifier", s.h.Name)
	}
	ch := n.Notify(t.Context())
	time.Sleep(200 * time.Millisecond) // let a LISTEN take effect
	enqueue(t, fx, msg("wake-up", ""))
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("Notify's channel received nothing within 5s of a committed Enqueue")
	}
}
