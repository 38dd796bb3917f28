package main_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// A crash costs seconds, not a lease. Two relay processes share a stream
// of events under the default 30 s lease; one is SIGKILLed mid-drain. On
// the stores that see a relay's session end (store.Sessions: PostgreSQL,
// MariaDB), every key of the dead relay's shards flows again within 3 s
// of the kill, through the other relay, with nothing lost and each key's
// order kept. (SQLite has no sessions: its lease stays the bound.)
func TestKilledRelaysKeysFlowWithinSeconds(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			h := newTakeover(t, kind, "30s")
			defer h.stopProducing()
			h.waitBothHoldShards()
			shardsA := h.shardsOf("a~")
			keysA := h.keysIn(shardsA)
			t.Logf("relay a holds %d shards, %d of the %d keys", len(shardsA), len(keysA), takeoverKeys)
			killed := time.Now()
			h.a.kill()
			// Every key of a's shards: its first event committed after
			// the kill reaches the broker within 3 s of the kill.
			deadline := killed.Add(3 * time.Second)
			for {
				late := h.keysWithoutDeliveryAfter(keysA, killed)
				if len(late) == 0 {
					t.Logf("a's keys all flowed again %s after the kill", time.Since(killed).Round(time.Millisecond))
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of a's %d keys had no event delivered within 3 s of a's SIGKILL (%v): its shards waited for the lease", len(late), len(keysA), late)
				}
				time.Sleep(20 * time.Millisecond)
			}
			h.stopProducing()
			// The rest drains well within the lease of the dead relay.
			waitRelaysDrained(t, h.o, kind, 20*time.Second, []*proc{h.b})
			h.b.stop(t)
			h.check()
		})
	}
}

// A relay SIGSTOPped mid-drain keeps its shards while its session lives
// and its lease runs (nothing of it is taken early), loses them when the
// lease ends, and changes nothing when it wakes up after that: no event is
// lost, each key's order holds, and it goes on sharing the work.
func TestStoppedRelayWakesAfterItsShardsMoved(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			const lease = 3 * time.Second
			h := newTakeover(t, kind, lease.String())
			defer h.stopProducing()
			h.waitBothHoldShards()
			shardsA := h.shardsOf("a~")
			keysA := h.keysIn(shardsA)
			_ = h.a.cmd.Process.Signal(syscall.SIGSTOP)
			stopped := time.Now()
			time.Sleep(lease / 2)
			if now := h.shardsOf("a~"); len(now) != len(shardsA) {
				t.Fatalf("a, stopped %s ago with its session alive and its lease running, holds %d of its %d shards: they were taken early", time.Since(stopped).Round(time.Millisecond), len(now), len(shardsA))
			}
			// Its lease ends: b takes its shards and its keys flow. On
			// MariaDB a stopped relay may hold row locks of a transaction
			// it was in, until the server ends that transaction (after
			// 5 s idle, mysqlstore's idle_transaction_timeout); the rest
			// is a margin for a loaded machine.
			limit := lease + 5*time.Second + 10*time.Second
			moved := time.Now()
			for len(h.keysWithoutDeliveryAfter(keysA, moved)) > 0 {
				if time.Since(stopped) > limit {
					t.Fatalf("a's keys did not flow again within %s of its SIGSTOP (lease %s)", limit, lease)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if now := h.shardsOf("a~"); len(now) != 0 {
				t.Fatalf("a's keys flow, but a still holds shards %v", now)
			}
			_ = h.a.cmd.Process.Signal(syscall.SIGCONT)
			t.Logf("a woke %s after its SIGSTOP", time.Since(stopped).Round(time.Millisecond))
			// Both go on: a takes its share again (new epochs) while the
			// producer writes.
			deadline := time.Now().Add(20 * time.Second)
			for len(h.shardsOf("a~")) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("a did not take shards again within 20 s of waking")
				}
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(time.Second)
			h.stopProducing()
			waitRelaysDrained(t, h.o, kind, 30*time.Second, []*proc{h.a, h.b})
			h.a.stop(t)
			h.b.stop(t)
			h.check()
		})
	}
}

// takeoverKeys is the number of keys the takeover tests write to.
const takeoverKeys = 40

// takeover is two relay processes, a and b, on one table, and a producer
// writing to takeoverKeys keys about 300 events a second, each payload
// "key#seq"; a core NATS subscription records when each payload arrived.
type takeover struct {
	t      *testing.T
	o      teststores.Opened
	s      *testnats.Stream
	a, b   *proc
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	sent     []outbox.Message
	received map[string]time.Time // payload → first arrival
}

func newTakeover(t *testing.T, kind, lease string) *takeover {
	t.Helper()
	o := teststores.Open(t, kind, store.Options{})
	natsURL := testnats.Shared(t)
	h := &takeover{t: t, o: o, s: testnats.NewStream(t, natsURL), received: map[string]time.Time{}, done: make(chan struct{})}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe(h.s.Subject+".>", func(m *nats.Msg) {
		h.mu.Lock()
		if _, ok := h.received[string(m.Data)]; !ok {
			h.received[string(m.Data)] = time.Now()
		}
		h.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	args := append(relayArgs(o, natsURL), "--lease", lease, "--log-level", "info")
	h.a = startRelay(t, append(args, "--owner", "a")...)
	h.b = startRelay(t, append(args, "--owner", "b")...)
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go h.produce(ctx)
	return h
}

// produce enqueues 3 events (over 3 keys in turn) every 10 ms until ctx
// ends.
func (h *takeover) produce(ctx context.Context) {
	defer close(h.done)
	seq := map[string]int{}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		msgs := make([]outbox.Message, 3)
		for j := range msgs {
			key := fmt.Sprintf("agg-%d", i%takeoverKeys)
			i++
			seq[key]++
			msgs[j] = outbox.Message{Topic: h.s.Topic("orders"), Key: key, Type: "Bumped", Payload: fmt.Appendf(nil, "%s#%d", key, seq[key])}
		}
		if err := h.o.Store.Enqueue(context.WithoutCancel(ctx), msgs...); err != nil {
			h.t.Errorf("enqueue: %v", err)
			return
		}
		h.mu.Lock()
		h.sent = append(h.sent, msgs...)
		h.mu.Unlock()
	}
}

func (h *takeover) stopProducing() {
	h.cancel()
	<-h.done
}

// shardsOf lists the shards whose row names an owner starting with prefix.
func (h *takeover) shardsOf(prefix string) []int {
	h.t.Helper()
	rows, err := h.o.DB.Query("SELECT shard, owner FROM " + h.o.Opts.Table + "_shards ORDER BY shard")
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var sh int
		var owner string
		if err := rows.Scan(&sh, &owner); err != nil {
			h.t.Fatal(err)
		}
		if strings.HasPrefix(owner, prefix) {
			out = append(out, sh)
		}
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// waitBothHoldShards waits until a and b each hold shards and events flow.
func (h *takeover) waitBothHoldShards() {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(h.shardsOf("a~")) == 0 || len(h.shardsOf("b~")) == 0 || h.deliveredSince(time.Now().Add(-time.Second)) == 0 {
		if time.Now().After(deadline) {
			h.t.Fatalf("after 30 s: a holds %v, b holds %v; %d events delivered", h.shardsOf("a~"), h.shardsOf("b~"), len(h.received))
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // mid-drain: both have batches in flight
}

func (h *takeover) deliveredSince(at time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, when := range h.received {
		if when.After(at) {
			n++
		}
	}
	return n
}

// keysIn returns the keys whose shard is among shards.
func (h *takeover) keysIn(shards []int) []string {
	h.t.Helper()
	so, ok := h.o.Store.(interface {
		ShardOf(ctx context.Context, key string, id int64) (int, error)
	})
	if !ok {
		h.t.Fatalf("%T has no ShardOf", h.o.Store)
	}
	var out []string
	for i := range takeoverKeys {
		key := fmt.Sprintf("agg-%d", i)
		sh, err := so.ShardOf(context.Background(), key, 0)
		if err != nil {
			h.t.Fatal(err)
		}
		for _, s := range shards {
			if s == sh {
				out = append(out, key)
			}
		}
	}
	if len(out) == 0 {
		h.t.Fatalf("no key of %d lies in shards %v", takeoverKeys, shards)
	}
	return out
}

// keysWithoutDeliveryAfter returns those of keys with no event that
// arrived after at.
func (h *takeover) keysWithoutDeliveryAfter(keys []string, at time.Time) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	flowed := map[string]bool{}
	for p, when := range h.received {
		if when.After(at) {
			k, _, _ := strings.Cut(p, "#")
			flowed[k] = true
		}
	}
	var out []string
	for _, k := range keys {
		if !flowed[k] {
			out = append(out, k)
		}
	}
	return out
}

// check asserts the stream holds every event written, each key's first
// deliveries in order.
func (h *takeover) check() {
	h.t.Helper()
	h.mu.Lock()
	sent := h.sent
	h.mu.Unlock()
	checkStream(h.t, h.s, sent)
}
