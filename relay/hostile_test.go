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
	"github.com/outbox-go/outbox/testkit/teststores"
)

// A row with created_at 'infinity' amid good ones (PostgreSQL: the
// table's domain refuses it, so the test drops the domain's check, as a
// table of another shape may lack it; SQLite: the text 'infinity') does
// not stop a real relay: every good event of the other keys is delivered,
// the row goes DEAD with a reason naming created_at, and its key's later
// event waits (issue 28: every claim
// failed, for every key, without end). MySQL's TIMESTAMP refuses the value.
func TestHostileCreatedAtAmidGoodOnes(t *testing.T) {
	const good, keys = 300, 10
	for _, kind := range []string{"postgres", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			opened := teststores.Open(t, kind, store.Options{})
			st, ctx := opened.Store, context.Background()
			table := st.(interface{ Table() string }).Table()
			insert := "INSERT INTO " + table + " (topic, event_key, event_type, payload, created_at) VALUES ('orders', 'hostile', 'Hostile', x'7b7d', 'infinity')"
			if kind == "postgres" {
				insert = strings.Replace(insert, "x'7b7d'", `'\x7b7d'`, 1)
				if _, err := opened.DB.ExecContext(ctx, `ALTER DOMAIN "`+opened.Opts.Table+`_created_t" DROP CONSTRAINT "`+opened.Opts.Table+`_created_check"`); err != nil {
					t.Fatal(err)
				}
			}
			enqueue := func(from, to int) {
				msgs := make([]outbox.Message, 0, to-from)
				for i := from; i < to; i++ {
					msgs = append(msgs, outbox.Message{Topic: "orders", Key: "k" + strconv.Itoa(i%keys), Type: "OrderPaid", Payload: fmt.Appendf(nil, "%d", i)})
				}
				if err := st.Enqueue(ctx, msgs...); err != nil {
					t.Fatal(err)
				}
			}
			enqueue(0, good/2)
			if _, err := opened.DB.ExecContext(ctx, insert); err != nil {
				t.Fatal(err)
			}
			if err := st.Enqueue(ctx, outbox.Message{Topic: "orders", Key: "hostile", Type: "Later", Payload: []byte("later")}); err != nil {
				t.Fatal(err)
			}
			enqueue(good/2, good)
			mb := newMem(t, membroker.Config{})
			cfg := fastConfig()
			cfg.LeaseFor = 30 * time.Second
			cfg.Logger = failureLog(t)
			r, _ := run(t, st, mb, cfg)
			waitFor(t, "every good event delivered", 2*time.Minute, func() bool { return distinct(mb.Events("orders")) >= good })
			var dead []store.Record
			waitFor(t, "the hostile row DEAD", time.Minute, func() bool {
				var err error
				if dead, err = st.ListDead(ctx, store.DeadQuery{}); err != nil {
					t.Fatalf("ListDead: %v", err)
				}
				return len(dead) > 0
			})
			if len(dead) != 1 || dead[0].Key != "hostile" || !strings.Contains(dead[0].LastError, "created_at") {
				t.Fatalf("ListDead: %+v; want the hostile row alone, with a reason naming created_at", dead)
			}
			for _, e := range mb.Events("orders") {
				if e.Key == "hostile" {
					t.Errorf("delivered %s of the hostile row's key: it went out, or its later event overtook it", e.Type)
				}
			}
			if s := pending(t, st); s.Dead != 1 || s.BlockedKeys != 1 {
				t.Errorf("Stats: %+v; want Dead 1, BlockedKeys 1", s)
			}
			if h := r.Health(); h.StoreError != "" {
				t.Errorf("the relay's store is failing: %s", h.StoreError)
			}
		})
	}
}
