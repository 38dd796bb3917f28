package relay_test

import (
	"context"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// A producer writing with plain SQL inserts a row whose status says SENDING
// and whose lease columns keep their defaults, then its key's next event:
// a running relay, on every database, delivers the first
// (an expired lease to take over) and then the second, or the database
// refused the first at INSERT and the second goes out alone. The key's
// later event never passes the SENDING row, and nothing stays in flight.
func TestSendingRowWithoutLease(t *testing.T) {
	for _, kind := range teststores.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			url := teststores.URL(t, kind)
			mark := "?"
			if kind == "postgres" {
				mark = "$1"
			}
			opened := teststores.OpenAt(t, kind, url, store.Options{})
			st, ctx := opened.Store, context.Background()
			mb := newMem(t, membroker.Config{})
			cfg := fastConfig()
			cfg.LeaseFor = 30 * time.Second // nothing here waits for a lease to run out
			cfg.Logger = failureLog(t)
			r, _ := run(t, st, mb, cfg)
			_, refused := opened.DB.ExecContext(ctx, "INSERT INTO "+opened.Opts.Table+" (topic, event_key, event_type, payload, status) VALUES ('orders', 'k', 'Stuck', '{}', "+mark+")", "SENDING")
			if err := st.Enqueue(ctx, outbox.Message{Topic: "orders", Key: "k", Type: "After", Payload: []byte(`{"after":1}`)}); err != nil {
				t.Fatal(err)
			}
			want := []string{"Stuck", "After"}
			if refused != nil {
				t.Logf("refused at INSERT: %v", refused)
				want = want[1:]
			}
			delivered := func() []string {
				var got []string
				seen := map[string]bool{}
				for _, e := range mb.Events("orders") {
					if !seen[e.EventID] {
						seen[e.EventID] = true
						got = append(got, e.Type)
					}
				}
				return got
			}
			for deadline := time.Now().Add(time.Minute); len(delivered()) < len(want) || pending(t, st).Pending() > 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("after a minute, delivered %v of %v; the store: %+v (the SENDING row without a lease is never taken over?); the relay: %+v", delivered(), want, pending(t, st), r.Health())
				}
			}
			if got := delivered(); len(got) != len(want) || got[0] != want[0] {
				t.Fatalf("delivered %v; want %v (the SENDING row without a lease first)", got, want)
			}
		})
	}
}
