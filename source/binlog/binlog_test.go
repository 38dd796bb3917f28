package binlog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/source"
	"github.com/outbox-go/outbox/source/binlog"
)

// collector reads a source as the delivery loop does, acknowledging
// every batch it read, and remembers the event ids in the order read.
type collector struct {
	src   *binlog.Source
	order []string
	seen  map[string]int
	last  outbox.Event
}

func collect(src *binlog.Source) *collector { return &collector{src: src, seen: map[string]int{}} }

// until reads until every id of want was read, or fails t after wait.
func (c *collector) until(t *testing.T, wait time.Duration, want ...string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		missing := 0
		for _, id := range want {
			if c.seen[id] == 0 {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, %d of %d events were not read", wait, missing, len(want))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		txns, err := c.src.Next(ctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			t.Fatalf("Next: %v", err)
		}
		var pos source.Position
		for _, tx := range txns {
			pos = max(pos, tx.Pos)
			for _, e := range tx.Events {
				if c.seen[e.EventID] == 0 {
					c.order = append(c.order, e.EventID)
				}
				c.seen[e.EventID]++
				c.last = e
			}
		}
		if err := c.src.Ack(context.Background(), pos); err != nil {
			t.Fatalf("Ack(%d): %v", pos, err)
		}
	}
}

// inOrder fails t unless want's ids were first read in that order.
func (c *collector) inOrder(t *testing.T, want []string) {
	t.Helper()
	at := map[string]int{}
	for i, id := range c.order {
		at[id] = i
	}
	for i := 1; i < len(want); i++ {
		if at[want[i-1]] > at[want[i]] {
			t.Fatalf("event %d of the commit order was read before event %d", i, i-1)
		}
	}
}

// produce commits n transactions of two events each (and a rolled-back one
// every tenth), calling between(i) before transaction i; it returns the
// committed events' ids in commit order and the rolled-back ones.
func produce(t *testing.T, f *fixture, n int, between func(i int)) (committed, rolled []string) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		if between != nil {
			between(i)
		}
		msgs := []outbox.Message{
			{EventID: outbox.NewEventID(), Topic: "t", Key: fmt.Sprintf("k%d", i%7), Type: "Made", Payload: fmt.Appendf(nil, "%d.a", i)},
			{EventID: outbox.NewEventID(), Topic: "t", Key: fmt.Sprintf("k%d", i%5), Type: "Made", Payload: fmt.Appendf(nil, "%d.b", i), Headers: map[string]string{"n": fmt.Sprint(i)}},
		}
		tx, err := f.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.store.EnqueueTx(ctx, tx, msgs...); err != nil {
			t.Fatal(err)
		}
		if i%10 == 9 {
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			rolled = append(rolled, msgs[0].EventID, msgs[1].EventID)
			continue
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		committed = append(committed, msgs[0].EventID, msgs[1].EventID)
	}
	return committed, rolled
}

func (f *fixture) killReplication(t *testing.T, src *binlog.Source) {
	t.Helper()
	id := src.ReplicationConnID()
	if id == 0 {
		t.Fatal("the source has no replication connection")
	}
	if _, err := f.db.Exec(fmt.Sprintf("KILL %d", id)); err != nil && !strings.Contains(err.Error(), "Unknown thread") {
		t.Fatal(err)
	}
}

// Committed events arrive in commit order, rolled-back ones never, across
// FLUSH BINARY LOGS (a real rotate) and the replication connection killed
// mid-stream (a reconnect from the last whole transaction, no fallback);
// every delivered row is deleted once acknowledged.
func TestStreamAcrossRotateAndKill(t *testing.T) {
	f := newFixture(t)
	src := f.start(t, f.cfg)
	c := collect(src)
	var mu sync.Mutex
	kills := 0
	committed, rolled := produce(t, f, 120, func(i int) {
		switch i {
		case 30, 90:
			f.exec("FLUSH BINARY LOGS")
		case 60, 100:
			time.Sleep(300 * time.Millisecond) // let the stream catch up, then cut it
			mu.Lock()
			kills++
			mu.Unlock()
			f.killReplication(t, src)
		}
	})
	c.until(t, 60*time.Second, committed...)
	c.inOrder(t, committed)
	for _, id := range rolled {
		if c.seen[id] > 0 {
			t.Fatalf("a rolled-back event (%s) was read", id)
		}
	}
	if n := src.Fallbacks(); n != 1 {
		t.Fatalf("the source read the table %d times; want once (at its first start): a rotate or a lost connection must not need it", n)
	}
	waitFor(t, "every delivered row deleted", 30*time.Second, func() bool { return f.count("true") == 0 })
}

func waitFor(t *testing.T, what string, wait time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", wait, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
