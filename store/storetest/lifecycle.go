package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
)

// testRetry: Retry counts the attempt, keeps the error and schedules the
// next attempt after Delay (database clock); not claimable before then.
func (s *suite) testRetry(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	enqueue(t, fx, msg("e1", "K"))
	c := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "first claim", c.Events, "e1")
	id := c.Events[0].ID
	const delay = 2 * time.Second
	before := time.Now()
	if err := fx.Store.Retry(t.Context(), driver.RetryParams{Lease: c.Lease, Retries: []driver.Retry{{ID: id, Delay: delay, Error: "broker said no: 503"}}}); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	after := time.Now()
	// Straight after the Retry, before the slower checks below: on a
	// loaded machine they alone have taken longer than the delay.
	early := claim(t, fx, req(s.lease("relay"), 10))
	if len(early.Events) != 0 && time.Since(after) < delay/2 {
		t.Fatalf("an event retried with Delay 2s was claimed again at once")
	}
	rec := get(t, fx, id)
	if rec.Status != outbox.StatusNew || rec.Attempts != 1 || rec.LastError != "broker said no: 503" || !rec.LeaseUntil.IsZero() {
		t.Errorf("Get after Retry: %s; want NEW, attempts 1, last error \"broker said no: 503\", no lease", describe(rec))
	}
	if !within(rec.NextAttemptAt, before.Add(delay), after.Add(delay), time.Second) {
		t.Errorf("NextAttemptAt after Retry(Delay 2s) is %v; want about %v", rec.NextAttemptAt, before.Add(delay))
	}
	if st := stats(t, fx); st.Retrying != 1 || st.New != 1 || st.Sending != 0 {
		t.Errorf("Stats with one event waiting for its retry: %+v; want Retrying 1, New 1, Sending 0", st)
	}
	again := early
	if len(again.Events) == 0 {
		again = s.eventually(t, fx, "relay", 10, 6*time.Second)
	}
	if got := time.Now(); got.Before(before.Add(delay - 250*time.Millisecond)) {
		t.Errorf("the retried event was claimable again after %v; want after its 2s delay", got.Sub(before))
	}
	wantLabels(t, "claim after the retry delay", again.Events, "e1")
	if again.Events[0].Attempts != 1 {
		t.Errorf("claimed again with Attempts %d; want 1", again.Events[0].Attempts)
	}
	if err := fx.Store.Retry(t.Context(), driver.RetryParams{Lease: again.Lease, Retries: []driver.Retry{{ID: id, Delay: time.Hour, Error: "second failure"}}}); err != nil {
		t.Fatalf("second Retry: %v", err)
	}
	if rec := get(t, fx, id); rec.Attempts != 2 || rec.LastError != "second failure" {
		t.Errorf("Get after the second Retry: %s; want attempts 2, last error \"second failure\"", describe(rec))
	}
}

// testBury: Bury marks DEAD with the reason and counts the attempt.
func (s *suite) testBury(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	enqueue(t, fx, msg("poison", ""), msg("fine", ""))
	c := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "claim", c.Events, "poison", "fine")
	if err := fx.Store.Bury(t.Context(), driver.BuryParams{Lease: c.Lease, Burials: []driver.Burial{{ID: c.Events[0].ID, Error: "message too large for the broker"}}}); err != nil {
		t.Fatalf("Bury: %v", err)
	}
	ack(t, fx, driver.Claim{Lease: c.Lease, Events: c.Events[1:]})
	rec := get(t, fx, c.Events[0].ID)
	if rec.Status != outbox.StatusDead || rec.LastError != "message too large for the broker" || rec.Attempts != 1 {
		t.Errorf("Get after Bury: %s; want DEAD, last error \"message too large for the broker\", attempts 1", describe(rec))
	}
	if !bytes.Equal(rec.Payload, c.Events[0].Payload) || rec.EventID != c.Events[0].EventID {
		t.Errorf("Get after Bury changed the event: payload %q event id %s; want %q %s", rec.Payload, rec.EventID, c.Events[0].Payload, c.Events[0].EventID)
	}
	if again := claim(t, fx, req(s.lease("relay"), 10)); len(again.Events) != 0 {
		t.Errorf("a DEAD event was claimed: %v", labels(again.Events))
	}
	if st := stats(t, fx); st.Dead != 1 || st.Pending() != 0 || st.BlockedKeys != 0 {
		t.Errorf("Stats with one keyless DEAD event: %+v; want Dead 1, nothing pending, BlockedKeys 0 (a keyless event holds no key)", st)
	}
	dead, err := fx.Store.ListDead(t.Context(), store.DeadQuery{})
	if err != nil {
		t.Fatalf("ListDead: %v", err)
	}
	if len(dead) != 1 || dead[0].ID != rec.ID || dead[0].LastError != rec.LastError || dead[0].Status != outbox.StatusDead {
		t.Errorf("ListDead: %d records; want exactly the buried event with its last error", len(dead))
	}
}

// testListRequeueDead: ListDead filters and pages; RequeueDead revives.
func (s *suite) testListRequeueDead(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	const n = 20
	var msgs []outbox.Message
	for i := range n {
		m := msg(fmt.Sprintf("d%02d", i), []string{"ka", "kb", ""}[i%3])
		m.Topic = []string{"t-a", "t-b"}[i%2]
		msgs = append(msgs, m)
	}
	enqueue(t, fx, msgs...)
	buried := s.buryAll(t, fx, n, func(ev outbox.Event) string { return "reason " + ev.Type })
	slices.SortFunc(buried, func(a, b outbox.Event) int { return int(a.ID - b.ID) })
	list := func(q store.DeadQuery) []store.Record {
		t.Helper()
		recs, err := fx.Store.ListDead(t.Context(), q)
		if err != nil {
			t.Fatalf("ListDead(%+v): %v", q, err)
		}
		for i, r := range recs {
			if r.Status != outbox.StatusDead || r.LastError != "reason "+r.Type {
				t.Errorf("ListDead record %d: %s type %q; want DEAD with last error \"reason %s\"", r.ID, describe(r), r.Type, r.Type)
			}
			if i > 0 && r.ID <= recs[i-1].ID {
				t.Errorf("ListDead out of id order: %d after %d", r.ID, recs[i-1].ID)
			}
		}
		return recs
	}
	want := func(q store.DeadQuery, keep func(i int, ev outbox.Event) bool) {
		t.Helper()
		var w []string
		for i, ev := range buried {
			if keep(i, ev) {
				w = append(w, ev.Type)
			}
		}
		var got []string
		for _, r := range list(q) {
			got = append(got, r.Type)
		}
		if !slices.Equal(got, w) {
			t.Errorf("ListDead(%+v) = %s; want %s", q, fmtLabels(got), fmtLabels(w))
		}
	}
	want(store.DeadQuery{}, func(int, outbox.Event) bool { return true })
	want(store.DeadQuery{Topic: "t-a"}, func(_ int, ev outbox.Event) bool { return ev.Topic == "t-a" })
	want(store.DeadQuery{Key: "kb"}, func(_ int, ev outbox.Event) bool { return ev.Key == "kb" })
	want(store.DeadQuery{Topic: "t-b", Key: "ka"}, func(_ int, ev outbox.Event) bool { return ev.Topic == "t-b" && ev.Key == "ka" })
	picked := []int64{buried[3].ID, buried[7].ID, buried[11].ID}
	want(store.DeadQuery{IDs: picked}, func(_ int, ev outbox.Event) bool { return slices.Contains(picked, ev.ID) })
	want(store.DeadQuery{Limit: 5}, func(i int, _ outbox.Event) bool { return i < 5 })

	// Paging with AfterID and Limit walks every record once, in order.
	var paged []int64
	after := int64(0)
	for pages := 0; ; pages++ {
		if pages > n {
			t.Fatalf("ListDead paging does not end")
		}
		page := list(store.DeadQuery{AfterID: after, Limit: 7})
		if len(page) > 7 {
			t.Fatalf("ListDead(Limit 7) returned %d records", len(page))
		}
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			paged = append(paged, r.ID)
		}
		after = page[len(page)-1].ID
	}
	if !slices.Equal(paged, ids(buried)) {
		t.Errorf("paging ListDead by 7 gave ids %v; want %v", paged, ids(buried))
	}

	// RequeueDead by ids.
	got, err := fx.Store.RequeueDead(t.Context(), store.DeadQuery{IDs: picked})
	if err != nil || got != int64(len(picked)) {
		t.Fatalf("RequeueDead(3 ids) = %d, %v; want 3, nil", got, err)
	}
	for _, id := range picked {
		if rec := get(t, fx, id); rec.Status != outbox.StatusNew || rec.Attempts != 0 {
			t.Errorf("requeued event %d: %s; want NEW with attempts 0", id, describe(rec))
		}
	}
	revived := s.drain(t, fx, "relay", false)
	if !slices.Equal(ids(revived), picked) {
		t.Errorf("claims after RequeueDead returned ids %v; want exactly the requeued %v", ids(revived), picked)
	}
	for _, ev := range revived {
		if ev.Attempts != 0 {
			t.Errorf("requeued event %d claimed with Attempts %d; want 0", ev.ID, ev.Attempts)
		}
	}
	// RequeueDead by topic counts what it moved.
	var wantN int64
	for _, ev := range buried {
		if ev.Topic == "t-b" && !slices.Contains(picked, ev.ID) {
			wantN++
		}
	}
	if got, err := fx.Store.RequeueDead(t.Context(), store.DeadQuery{Topic: "t-b"}); err != nil || got != wantN {
		t.Errorf("RequeueDead(topic t-b) = %d, %v; want %d, nil", got, err, wantN)
	}
	if st := stats(t, fx); st.Dead != int64(n-len(picked))-wantN || st.New != wantN {
		t.Errorf("Stats after requeueing: %+v; want Dead %d, New %d", st, int64(n-len(picked))-wantN, wantN)
	}
}

// testPurgeDead: Purge deletes DEAD events by age in bounded batches and
// leaves everything else.
func (s *suite) testPurgeDead(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	const n = 20
	var msgs []outbox.Message
	for i := range n {
		m := msg(fmt.Sprintf("d%02d", i), "")
		if i == 0 {
			m.Key = "dk"
		}
		if i%2 == 1 {
			m.Topic = "odd"
		}
		msgs = append(msgs, m)
	}
	enqueue(t, fx, msgs...)
	s.buryAll(t, fx, n, func(outbox.Event) string { return "poison" })
	enqueue(t, fx, msg("alive-1", "K"), msg("alive-2", ""))
	held := claim(t, fx, req(s.lease("relay"), 1))
	wantLabels(t, "claim", held.Events, "alive-1")

	if got, err := fx.Store.Purge(t.Context(), store.PurgeRequest{Status: outbox.StatusDead, OlderThan: time.Hour}); err != nil || got != 0 {
		t.Errorf("Purge(DEAD, older than 1h) of events a second old = %d, %v; want 0, nil", got, err)
	}
	time.Sleep(1100 * time.Millisecond) // clear of second-precision clocks
	if _, err := fx.Store.Purge(t.Context(), store.PurgeRequest{Status: outbox.StatusSent, Topic: "t"}); err == nil {
		t.Errorf("Purge(SENT, Topic) succeeded; sent events are purged by age only")
	}
	if _, err := fx.Store.Purge(t.Context(), store.PurgeRequest{Status: outbox.StatusSent, IDs: []int64{1}}); err == nil {
		t.Errorf("Purge(SENT, IDs) succeeded; sent events are purged by age only")
	}
	// IDs purges those DEAD events alone, and never a live one.
	dead, err := fx.Store.ListDead(t.Context(), store.DeadQuery{Limit: n})
	if err != nil || len(dead) != n {
		t.Fatalf("ListDead = %d records, %v; want %d", len(dead), err, n)
	}
	if got, err := fx.Store.Purge(t.Context(), store.PurgeRequest{Status: outbox.StatusDead, IDs: []int64{dead[2].ID, dead[4].ID, held.Events[0].ID}}); err != nil || got != 2 {
		t.Errorf("Purge(DEAD, IDs of d02, d04 and a claimed event) = %d, %v; want 2", got, err)
	}
	if _, err := fx.Store.Get(t.Context(), dead[2].ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(d02) after purging it by id: %v; want ErrNotFound", err)
	}
	// d00 has key dk; the events of topic "odd" are d01, d03, …
	if got, err := fx.Store.Purge(t.Context(), store.PurgeRequest{Status: outbox.StatusDead, Key: "dk"}); err != nil || got != 1 {
		t.Errorf("Purge(DEAD, Key dk) = %d, %v; want 1 (d00 alone)", got, err)
	}
	if got, err := fx.Store.Purge(t.Context(), store.PurgeRequest{Status: outbox.StatusDead, Topic: "odd", BatchSize: 3}); err != nil || got != n/2 {
		t.Errorf("Purge(DEAD, Topic odd) = %d, %v; want %d", got, err, n/2)
	}
	got, err := fx.Store.Purge(t.Context(), store.PurgeRequest{Status: outbox.StatusDead, OlderThan: 0, BatchSize: 7})
	if err != nil || got != n/2-3 {
		t.Fatalf("Purge(DEAD, older than 0, batch size 7) = %d, %v; want %d, nil (every batch, not just the first)", got, err, n/2-3)
	}
	if recs, err := fx.Store.ListDead(t.Context(), store.DeadQuery{}); err != nil || len(recs) != 0 {
		t.Errorf("ListDead after purging: %d records, %v; want none", len(recs), err)
	}
	st := stats(t, fx)
	if st.Dead != 0 || st.New != 1 || st.Sending != 1 {
		t.Errorf("Stats after purging DEAD events: %+v; want Dead 0 and the NEW and SENDING events untouched", st)
	}
	ack(t, fx, held)
	wantLabels(t, "claim after the purge", s.drain(t, fx, "relay", true), "alive-2")
}

// testKeepSent: with KeepSent, Ack moves events to the archive as SENT;
// Purge empties the archive.
func (s *suite) testKeepSent(t *testing.T) {
	fx := s.migrated(t, store.Options{KeepSent: true})
	m := msg("kept", "K")
	m.Payload = []byte{0, 1, 2, 0xff, 'x'}
	m.Headers = map[string]string{"trace": "t-1"}
	enqueue(t, fx, m, msg("kept-2", ""), msg("kept-3", "L"))
	c := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "claim", c.Events, "kept", "kept-2", "kept-3")
	before := time.Now()
	ack(t, fx, c)
	rec := get(t, fx, c.Events[0].ID)
	if rec.Status != outbox.StatusSent || rec.SentAt.IsZero() || !near(rec.SentAt, before, time.Minute) {
		t.Errorf("Get after Ack with KeepSent: %s, sent at %v; want SENT with SentAt about now", describe(rec), rec.SentAt)
	}
	if !bytes.Equal(rec.Payload, m.Payload) || rec.EventID != c.Events[0].EventID || rec.Topic != m.Topic || rec.Key != m.Key || rec.Headers["trace"] != "t-1" {
		t.Errorf("archived event came back as %+v; want the original message intact", rec.Event)
	}
	if again := claim(t, fx, req(s.lease("relay"), 10)); len(again.Events) != 0 {
		t.Errorf("an archived (SENT) event was claimed again: %v", labels(again.Events))
	}
	if st := stats(t, fx); st.Sent != 3 || st.Pending() != 0 {
		t.Errorf("Stats after acking 3 events with KeepSent: %+v; want Sent 3, nothing pending", st)
	}
	if got, err := fx.Store.Purge(t.Context(), store.PurgeRequest{Status: outbox.StatusSent, OlderThan: time.Hour}); err != nil || got != 0 {
		t.Errorf("Purge(SENT, older than 1h) of just-sent events = %d, %v; want 0, nil", got, err)
	}
	time.Sleep(1100 * time.Millisecond) // clear of second-precision clocks
	if got, err := fx.Store.Purge(t.Context(), store.PurgeRequest{Status: outbox.StatusSent, OlderThan: 0, BatchSize: 2}); err != nil || got != 3 {
		t.Errorf("Purge(SENT, older than 0, batch size 2) = %d, %v; want 3, nil", got, err)
	}
	wantNotFound(t, fx, c.Events[0].ID, "after purging the archive")
	if st := stats(t, fx); st.Sent != 0 {
		t.Errorf("Stats after purging the archive: %+v; want Sent 0", st)
	}
}

// testDeleteOnAck: without KeepSent, Ack deletes.
func (s *suite) testDeleteOnAck(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	enqueue(t, fx, msg("gone", ""))
	c := claim(t, fx, req(s.lease("relay"), 10))
	ack(t, fx, c)
	wantNotFound(t, fx, c.Events[0].ID, "after Ack without KeepSent")
	wantNotFound(t, fx, c.Events[0].ID+1_000_000, "of an id that never existed")
	if st := stats(t, fx); st != (store.Stats{}) {
		t.Errorf("Stats after acking the only event: %+v; want all zero", st)
	}
}

// testStats: every counter, on one table holding each kind of event.
func (s *suite) testStats(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	if st := stats(t, fx); st != (store.Stats{}) || st.Pending() != 0 {
		t.Errorf("Stats of an empty table: %+v; want all zero", st)
	}
	// The dead events are the oldest: OldestPending must not count them.
	enqueue(t, fx, msg("x", ""), msg("b1", "b"))
	ctx := t.Context()
	doomed := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "claim", doomed.Events, "x", "b1")
	dead := byLabel(doomed.Events)
	if err := fx.Store.Bury(ctx, driver.BuryParams{Lease: doomed.Lease, Burials: []driver.Burial{{ID: dead["x"].ID, Error: "dead keyless"}, {ID: dead["b1"].ID, Error: "dead keyed"}}}); err != nil {
		t.Fatalf("Bury: %v", err)
	}
	time.Sleep(2 * time.Second)

	start := time.Now()
	enqueue(t, fx, msg("a1", "a"), msg("c1", "c"), msg("d1", "d"))
	enqueued := time.Now()
	c := claim(t, fx, req(s.lease("relay"), 10))
	wantLabels(t, "claim", c.Events, "a1", "c1", "d1")
	ev := byLabel(c.Events)
	if err := fx.Store.Retry(ctx, driver.RetryParams{Lease: c.Lease, Retries: []driver.Retry{{ID: ev["d1"].ID, Delay: time.Hour, Error: "later"}}}); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if err := fx.Store.Release(ctx, driver.ReleaseParams{Lease: c.Lease, IDs: []int64{ev["c1"].ID}}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	r := req(s.lease("relay"), 10) // the same relay: its live claim of a1 holds nothing of its own
	r.LeaseFor = time.Second
	short := claim(t, fx, r)
	wantLabels(t, "claim with a 1s lease", short.Events, "c1")
	enqueue(t, fx, msg("b2", "b"), msg("e1", ""), msg("e2", "e"))
	sleepUntil(short.Until.Add(300 * time.Millisecond))

	before := time.Now()
	st := stats(t, fx)
	want := store.Stats{New: 4, Sending: 2, Dead: 2, Retrying: 1, ExpiredLeases: 1, BlockedKeys: 1}
	got := st
	got.OldestPending = 0
	if got != want {
		t.Errorf("Stats = %+v\nwant    %+v (New: b2 d1 e1 e2; Sending: a1 and c1 whose lease ran out; Dead: x b1; Retrying: d1; BlockedKeys: b)", got, want)
	}
	if st.Pending() != 6 {
		t.Errorf("Stats.Pending() = %d; want 6", st.Pending())
	}
	// a1 is the oldest pending event (x and b1 are older but DEAD): its
	// age lies between these bounds.
	lo, hi := before.Sub(enqueued), time.Since(start)
	if st.OldestPending <= 0 || st.OldestPending < lo-time.Second || st.OldestPending > hi+time.Second {
		t.Errorf("Stats.OldestPending = %v; want the age of the oldest NEW or SENDING event, between %v and %v (DEAD events do not count)", st.OldestPending, lo, hi)
	}
}
