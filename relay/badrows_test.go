package relay_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/storetest"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// A producer writing with plain SQL puts one bad row of each kind amid
// 2,000 good ones on 50 keys, on every database: a real relay delivers every
// good event of another key within seconds, the bad row is refused at INSERT
// or DEAD with its reason, and its key is held (its later event is not
// delivered) and visible in ListDead and Stats.
func TestBadRowsAmidGoodOnes(t *testing.T) {
	const good, keys = 2000, 50
	for _, kind := range teststores.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			url, placeholder := teststores.URL(t, kind), placeholderOf(kind)
			for _, b := range storetest.BadRows {
				t.Run(b.Name, func(t *testing.T) {
					opened := teststores.OpenAt(t, kind, url, store.Options{})
					st, ctx := opened.Store, context.Background()
					enqueueGood := func(from, to int) {
						msgs := make([]outbox.Message, 0, to-from)
						for i := from; i < to; i++ {
							msgs = append(msgs, outbox.Message{Topic: "orders", Key: "k" + strconv.Itoa(i%keys), Type: "OrderPaid", Payload: fmt.Appendf(nil, "%d", i)})
						}
						if err := st.Enqueue(ctx, msgs...); err != nil {
							t.Fatal(err)
						}
					}
					enqueueGood(0, good/2)
					refused := b.Insert(ctx, opened.DB, opened.Opts.Table, placeholder, []byte(`{"bad":true}`))
					// Its key's later event, unless the key itself is bad.
					later := !strings.ContainsRune(b.Key(), 0x1b)
					if later {
						if err := st.Enqueue(ctx, outbox.Message{Topic: "orders", Key: b.Key(), Type: "Later", Payload: []byte("later")}); err != nil {
							t.Fatal(err)
						}
					}
					enqueueGood(good/2, good)

					mb := newMem(t, membroker.Config{})
					cfg := fastConfig()
					cfg.BatchSize = 500
					// A claim's deadline is LeaseFor/2 (at least 5 s). SQLite
					// under -race (modernc's C, instrumented) is about 100
					// times slower: a claim of 500 took 5–7 s at load 44
					// (6–65 ms without -race), every claim timed out and the
					// relay backed off. Nothing here waits for a lease to
					// run out, so a long one costs nothing.
					cfg.LeaseFor = 30 * time.Second
					cfg.Logger = failureLog(t)
					start := time.Now()
					r, _ := run(t, st, mb, cfg)
					want := good
					if refused != nil && later {
						want++ // nothing holds the key
					}
					// Seconds without -race; the bound leaves room for -race on
					// a loaded machine.
					const within = 3 * time.Minute
					deadline := time.Now().Add(within)
					for distinct(mb.Events("orders")) < want {
						if time.Now().After(deadline) {
							st, _ := st.Stats(ctx)
							t.Fatalf("after %v, %d of %d events delivered; the store: %+v; the relay: %+v", within, distinct(mb.Events("orders")), want, st, r.Health())
						}
						time.Sleep(10 * time.Millisecond)
					}
					took := time.Since(start)
					var laterDelivered bool
					for _, e := range mb.Events("orders") {
						if e.Key == b.Key() {
							laterDelivered = true
						}
						if e.Type != "OrderPaid" && e.Type != "Later" {
							t.Errorf("delivered an event of type %q: the bad row went out", e.Type)
						}
					}
					if refused != nil {
						t.Logf("%d events delivered in %v; refused at INSERT: %v", want, took.Round(time.Millisecond), refused)
						if later && !laterDelivered {
							t.Errorf("the bad row was refused, yet its key's later event was not delivered")
						}
						return
					}
					if laterDelivered {
						t.Fatalf("the later event of the bad row's key was delivered ahead of it")
					}
					var dead []store.Record
					waitFor(t, "the bad row DEAD", time.Minute, func() bool {
						var err error
						dead, err = st.ListDead(ctx, store.DeadQuery{})
						if err != nil {
							t.Fatalf("ListDead: %v", err)
						}
						return len(dead) > 0
					})
					if len(dead) != 1 || dead[0].Key != b.Key() || !strings.Contains(dead[0].LastError, b.Reason) {
						t.Fatalf("ListDead: %v; want the bad row alone, with a reason saying %q", dead, b.Reason)
					}
					// The claim that buried the row gives its key's later
					// event back just after (Screen: bury, then release),
					// and a good event whose ack a lost lease refused
					// goes out again: wait for both before reading the
					// counts (a minute, then the checks below say what
					// is left).
					wantNew := int64(0)
					if later {
						wantNew = 1
					}
					var stats store.Stats
					for until := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
						stats = pending(t, st)
						if stats.Sending == 0 && stats.New == wantNew || time.Now().After(until) {
							break
						}
					}
					// The relay counts it DEAD (and logs it), whether the
					// broker refused it or the claim buried it for
					// breaking the table contract.
					if n := r.Totals().Dead.Load(); n != 1 {
						t.Errorf("the relay's Totals say %d DEAD; want 1", n)
					}
					if stats.Dead != 1 || stats.BlockedKeys != 1 {
						t.Errorf("Stats: %+v; want Dead 1, BlockedKeys 1", stats)
					}
					if later && stats.New != 1 {
						t.Errorf("Stats: %+v; want New 1 (the bad row's later event, held)", stats)
					}
					t.Logf("%d good events delivered in %v; DEAD: %s", good, took.Round(time.Millisecond), dead[0].LastError)
				})
			}
		})
	}
}

// placeholderOf is the bind parameter of kind's SQL dialect.
func placeholderOf(kind string) func(int) string {
	if kind == "postgres" {
		return storetest.Dollar
	}
	return storetest.Question
}

// distinct counts the events by EventID: a redelivery (at least once) is
// not one more event delivered.
func distinct(events []outbox.Event) int {
	seen := make(map[string]bool, len(events))
	for _, e := range events {
		seen[e.EventID] = true
	}
	return len(seen)
}

// A claim that only buried a bad row is followed by the next claim at
// once, not after PollInterval: the event behind the bad row, committed
// before the relay started (so no wake-up is on its way), is delivered
// within seconds although the relay polls once an hour.
func TestClaimAgainAfterABurialOnlyClaim(t *testing.T) {
	for _, kind := range teststores.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			url, placeholder := teststores.URL(t, kind), placeholderOf(kind)
			opened := teststores.OpenAt(t, kind, url, store.Options{ProbeInterval: -1})
			st, ctx := opened.Store, context.Background()
			bad := storetest.InsertAccepted(ctx, opened.DB, opened.Opts.Table, placeholder, nil)
			if bad == nil {
				t.Fatal("the database refused every kind of bad row at INSERT")
			}
			if err := st.Enqueue(ctx, outbox.Message{Topic: "orders", Key: "after-the-bad-row", Type: "OrderPaid", Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			mb := newMem(t, membroker.Config{})
			cfg := fastConfig()
			cfg.BatchSize, cfg.Workers, cfg.PollInterval = 1, 1, time.Hour
			cfg.LeaseFor = 30 * time.Second
			cfg.Logger = failureLog(t)
			run(t, st, mb, cfg)
			deadline := time.Now().Add(30 * time.Second)
			for len(mb.Events("orders")) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the event behind the bad row %s was not delivered within 30 s (PollInterval is an hour)", bad.Name)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
