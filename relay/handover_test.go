package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// shardWatch is a HookShards that keeps a relay's latest heartbeat, when
// it came, and when the relay first marked shards Revoke.
type shardWatch struct {
	mu      sync.Mutex
	last    relay.ShardInfo
	at      time.Time // when last came
	revoked time.Time // first heartbeat that marked a shard Revoke
}

// watchedPair returns a broker and the configurations of two relays, A and
// B, each watched by its shardWatch, with the default lease's heartbeat
// period (10 s): long enough that a prompt handover is not a heartbeat's.
func watchedPair(t *testing.T) (mb *membroker.Broker, cfgA, cfgB relay.Config, a, b *shardWatch) {
	mb = newMem(t, membroker.Config{})
	cfg := fastConfig()
	cfg.LeaseFor = 30 * time.Second // a heartbeat every 10 s, as by default
	a, b = &shardWatch{}, &shardWatch{}
	cfgA, cfgB = cfg, cfg
	cfgA.Hooks, cfgB.Hooks = []relay.Hook{a}, []relay.Hook{b}
	return mb, cfgA, cfgB, a, b
}

func (w *shardWatch) OnShards(_ context.Context, s relay.ShardInfo) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.Err != nil {
		return
	}
	w.last, w.at = s, time.Now()
	for _, l := range s.Held {
		if l.Revoke && w.revoked.IsZero() {
			w.revoked = time.Now()
		}
	}
}

func (w *shardWatch) get() (relay.ShardInfo, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.revoked
}

// Two relays started together on a fresh table (every deploy): the first
// heartbeat of A takes every shard before B is live; B then finds none
// free, and A learns of B at its next heartbeat (LeaseFor/3 later) and
// marks its surplus Revoke. A stops claiming from those shards at once, so
// it must hand them over at once too: it released them only at its next
// heartbeat, another LeaseFor/3 later when no batch of them was in flight
// to signal the drain, and their events waited that long (10 s with the
// default 30 s lease: p99 ≈ 10 s in `outbox bench` at each start).
func TestOwnedRevokedIdleShardsAreHandedOverAtOnce(t *testing.T) {
	forEachOpened(t, func(t *testing.T, o teststores.Opened) {
		st := o.Store
		mb, cfgA, cfgB, a, b := watchedPair(t)
		run(t, st, mb, cfgA)
		waitFor(t, "relay A to take every shard", 20*time.Second, func() bool {
			s, _ := a.get()
			return s.Shards > 0 && len(s.Held) == s.Shards
		})
		if s, _ := a.get(); s.Shards < 2 {
			t.Logf("%s has %d shard: a relay's share is at most one, nothing is revoked or handed over", t.Name(), s.Shards)
			return
		}
		run(t, st, mb, cfgB)
		waitFor(t, "relay B's first heartbeat", 20*time.Second, func() bool {
			s, _ := b.get()
			return s.Relays == 2
		})
		// A's next heartbeat, about 10 s after its first, marks the
		// surplus.
		var revoked time.Time
		waitFor(t, "relay A to mark its surplus Revoke", 30*time.Second, func() bool {
			_, revoked = a.get()
			return !revoked.IsZero()
		})
		msgs := make([]outbox.Message, 200)
		for i := range msgs {
			msgs[i] = outbox.Message{Topic: "t", Key: fmt.Sprintf("k%d", i), Type: "Bumped", Payload: fmt.Appendf(nil, "k%d#1", i)}
		}
		if err := st.Enqueue(context.Background(), msgs...); err != nil {
			t.Fatal(err)
		}
		// Well under the 10 s until A's next heartbeat.
		const within = 5 * time.Second
		waitFor(t, "relay B to hold its share", within, func() bool {
			s, _ := b.get()
			return len(s.Held) == s.Shards/2
		})
		waitFor(t, "every event delivered", within, func() bool { return pending(t, st).Pending() == 0 })
		checkDelivered(t, msgs, mb.Events("t"))
		t.Logf("B held its share %s after A marked the revoke", time.Since(revoked).Round(time.Millisecond))
	})
}

// A relay that joins while another holds every shard (two processes, each
// with its own Store): the holder would learn of it at its next heartbeat,
// LeaseFor/3 later (10 s by default), and until then one relay did all the
// work (most of a 10 s `outbox bench --relays 2`: commit → ack p50 ≈ 12
// ms). PostgreSQL: the joiner's heartbeat, short of its share, asks the
// holder over LISTEN to heartbeat now. MariaDB: the holder's half-second
// look at the relays' sessions also sees a live relay short of its share
// while it holds more than its own. Either way the joiner holds its share
// within a second or so, well before the holder's next heartbeat.
func TestOwnedJoiningRelayGetsItsShareBeforeTheNextHeartbeat(t *testing.T) {
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			o := teststores.Open(t, kind, store.Options{})
			stB := teststores.OpenAt(t, kind, o.URL, o.Opts).Store // a process of its own
			mb, cfgA, cfgB, a, b := watchedPair(t)
			_, stopA := run(t, o.Store, mb, cfgA)
			defer stopA()
			waitFor(t, "relay A to take every shard", 20*time.Second, func() bool {
				s, _ := a.get()
				return s.Shards > 0 && len(s.Held) == s.Shards
			})
			a.mu.Lock()
			beatA := a.at // A's next heartbeat is 10 s after this one
			a.mu.Unlock()
			joined := time.Now()
			_, stopB := run(t, stB, mb, cfgB)
			defer stopB()
			waitFor(t, "relay B to hold its share", 5*time.Second, func() bool {
				s, _ := b.get()
				return s.Shards > 0 && len(s.Held) == s.Shards/2
			})
			if since := time.Since(beatA); since > 5*time.Second {
				t.Fatalf("B held its share %s after A's last heartbeat before B started; want well under A's heartbeat period (10 s)", since.Round(time.Millisecond))
			}
			t.Logf("B held its share %s after it started", time.Since(joined).Round(time.Millisecond))
		})
	}
}
