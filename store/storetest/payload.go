package storetest

import (
	"bytes"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/outbox-go/outbox/store"
)

// previewPayload is the size of the DEAD row testPreviewCost lists: large
// against a preview, within every database's default packet limit.
const previewPayload = 12 << 20

// testPreviewCost: ListDead of a DEAD row of 12 MiB allocates far less
// than the payload (it reads its first store.PreviewBytes and its length),
// and CopyPayload writes the payload whole. It runs before the parallel
// subtests, as it measures the process's allocations.
func (s *suite) testPreviewCost(t *testing.T) {
	fx := s.migrated(t, store.Options{})
	ctx := t.Context()
	payload := bytes.Repeat([]byte("0123456789abcdef"), previewPayload/16)
	payload[0] = 'X'
	if _, err := fx.DB.ExecContext(ctx, "INSERT INTO "+fx.Table+" (topic, event_key, event_type, payload, status) VALUES ("+
		strings.Join([]string{fx.Placeholder(1), fx.Placeholder(2), fx.Placeholder(3), fx.Placeholder(4), fx.Placeholder(5)}, ", ")+")",
		"orders", "big", "TooLarge", payload, "DEAD"); err != nil {
		t.Fatalf("inserting a DEAD row of %d bytes: %v", len(payload), err)
	}
	// The process's allocations count other tests' too (a harness may
	// run beside another): the least of a few tries is ListDead's.
	var recs []store.Record
	least := uint64(math.MaxUint64)
	for range 5 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var err error
		recs, err = fx.Store.ListDead(ctx, store.DeadQuery{})
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatalf("ListDead: %v", err)
		}
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	if least > previewPayload/8 {
		t.Errorf("ListDead of one DEAD row of %d bytes allocated %d bytes (the least of 5 tries); want well below the payload (a preview and its length)", len(payload), least)
	}
	if len(recs) != 1 {
		t.Fatalf("ListDead: %d records; want 1", len(recs))
	}
	r := recs[0]
	if r.PayloadSize != len(payload) || !bytes.Equal(r.Payload, payload[:store.PreviewBytes]) {
		t.Errorf("ListDead: PayloadSize %d and %d bytes of payload; want %d and its first %d", r.PayloadSize, len(r.Payload), len(payload), store.PreviewBytes)
	}
	var out bytes.Buffer
	if err := store.CopyPayload(ctx, fx.Store, r.ID, r.PayloadSize, &out); err != nil {
		t.Fatalf("CopyPayload: %v", err)
	}
	if !bytes.Equal(out.Bytes(), payload) {
		t.Errorf("CopyPayload wrote %d bytes; want the %d of the payload, unchanged", out.Len(), len(payload))
	}
	if g := get(t, fx, r.ID); g.PayloadSize != len(payload) || !bytes.Equal(g.Payload, payload) {
		t.Errorf("Get: PayloadSize %d and %d bytes of payload; want the whole payload", g.PayloadSize, len(g.Payload))
	}
}
