package relay_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/internal/testnats"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/pgstore"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// BenchmarkCommitToAckStages traces each event of a plain-SQL producer at a
// steady rate through two relays (each with a Store and pool of its own, as
// two processes would have) on PostgreSQL and membroker, and reports the
// p50/p90/p99 of each stage of its path: COMMIT returned → the owning
// relay's store signalled (commit probe) → the relay's round that claimed
// it started → the store's claim call started (after the dispatcher's
// lock) → the claim returned → the publish call started → the broker
// confirmed → the batch settled; and, from each relay's pool, the waits
// for a connection and the claims' batch round trips (poolTrace).
// STAGES_BROKER=nats publishes to the local NATS JetStream instead of
// membroker. Run it so:
//
//	go test -run '^$' -bench CommitToAckStages -benchtime 1x -timeout 5m ./relay/
//
// It is a diagnosis, not a timed test: it asserts nothing about times.
func BenchmarkCommitToAckStages(b *testing.B) {
	if w, err := time.ParseDuration(os.Getenv("STAGES_WARMUP")); err == nil {
		warmup = w
	}
	for range b.N {
		stageRun(b, 300, 8*time.Second, 1000)
	}
}

// stageStore times the store's claim calls of one relay.
type stageStore struct {
	*pgstore.Store
	tr *stageTrace
	id int
}

func (s *stageStore) Claim(ctx context.Context, req driver.ClaimParams) (driver.Claim, error) {
	start := time.Now()
	c, err := s.Store.Claim(ctx, req)
	s.tr.claimCall(s.id, start, c.Events)
	return c, err
}

type stageEvent struct {
	commit, round, call, claimed, pubStart, confirmed, settled time.Time
	relay                                                      int
}

type claimRec struct {
	start, end time.Time
	ids        []int64
}

type stageTrace struct {
	mu       sync.Mutex
	ev       map[int64]*stageEvent
	signals  [2][]time.Time
	calls    [2][]claimRec
	leases   map[driver.Lease][]int64
	shards   [2]string
	released [2]int
	pools    [2]poolTrace // each relay's pool
	beats    [2]int
}

func (tr *stageTrace) get(id int64) *stageEvent {
	e := tr.ev[id]
	if e == nil {
		e = &stageEvent{}
		tr.ev[id] = e
	}
	return e
}

func (tr *stageTrace) claimCall(relay int, start time.Time, evs []outbox.Event) {
	now := time.Now()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	rec := claimRec{start: start, end: now}
	for _, e := range evs {
		x := tr.get(e.ID)
		x.call, x.relay = start, relay
		rec.ids = append(rec.ids, e.ID)
	}
	tr.calls[relay] = append(tr.calls[relay], rec)
}

// stageHook is one relay's hooks.
type stageHook struct {
	tr *stageTrace
	id int
}

func (h *stageHook) OnClaim(_ context.Context, c relay.ClaimInfo) {
	now := time.Now()
	h.tr.mu.Lock()
	defer h.tr.mu.Unlock()
	for _, e := range c.Events {
		x := h.tr.get(e.ID)
		x.round, x.claimed = now.Add(-c.Took), now
		h.tr.leases[c.Lease] = append(h.tr.leases[c.Lease], e.ID)
	}
}

func (h *stageHook) OnShards(_ context.Context, s relay.ShardInfo) {
	h.tr.mu.Lock()
	defer h.tr.mu.Unlock()
	n := 0
	for _, l := range s.Held {
		if !l.Revoke {
			n++
		}
	}
	h.tr.released[h.id] += len(s.Released)
	h.tr.beats[h.id]++
	h.tr.shards[h.id] = fmt.Sprintf("held %d+%d revoked of %d (relays %d, err %v, released so far %d, heartbeats %d)", n, len(s.Held)-n, s.Shards, s.Relays, s.Err, h.tr.released[h.id], h.tr.beats[h.id])
}

func (h *stageHook) OnPublishStart(ctx context.Context, events []outbox.Event) context.Context {
	now := time.Now()
	h.tr.mu.Lock()
	defer h.tr.mu.Unlock()
	for _, e := range events {
		h.tr.get(e.ID).pubStart = now
	}
	return ctx
}

func (h *stageHook) OnPublishEnd(_ context.Context, p relay.PublishInfo) {
	now := time.Now()
	h.tr.mu.Lock()
	defer h.tr.mu.Unlock()
	for i, e := range p.Events {
		if p.Results[i].Err == nil {
			h.tr.get(e.ID).confirmed = now
		}
	}
}

func (h *stageHook) OnSettle(_ context.Context, r relay.BatchReport) {
	now := time.Now()
	h.tr.mu.Lock()
	defer h.tr.mu.Unlock()
	for _, id := range h.tr.leases[r.Lease] {
		h.tr.get(id).settled = now
	}
	delete(h.tr.leases, r.Lease)
}

// warmup is the wait between the relays starting and the producers.
var warmup = 2 * time.Second

func stageRun(b *testing.B, rate int, dur time.Duration, keys int) {
	ctx := context.Background()
	o := teststores.Open(b, "postgres", store.Options{})
	tr := &stageTrace{ev: map[int64]*stageEvent{}, leases: map[driver.Lease][]int64{}}
	// STAGES_BROKER=nats publishes to the local NATS JetStream instead
	// (each relay with its own connection, as two processes would)
	topic := "t"
	var brokers [2]broker.Broker
	if os.Getenv("STAGES_BROKER") == "nats" {
		url := testnats.Shared(b)
		topic = testnats.NewStream(b, url).Topic("t")
		for i := range brokers {
			nb, err := natsbroker.Dial(url, natsbroker.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer nb.Close(ctx)
			brokers[i] = nb
		}
	} else {
		mb, err := membroker.New(membroker.Config{})
		if err != nil {
			b.Fatal(err)
		}
		brokers[0], brokers[1] = mb, mb
	}
	var stops []func()
	for i := range 2 {
		pc, err := pgxpool.ParseConfig(o.URL)
		if err != nil {
			b.Fatal(err)
		}
		pc.MaxConns = 10 // as pgstore.Open sets it
		pc.ConnConfig.Tracer = &tr.pools[i]
		relayPool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			b.Fatal(err)
		}
		defer relayPool.Close()
		ps, err := pgstore.New(relayPool, pgstore.Config{Options: o.Opts})
		if err != nil {
			b.Fatal(err)
		}
		defer ps.Close()
		st := &stageStore{Store: ps, tr: tr, id: i}
		nctx, cancel := context.WithCancel(ctx)
		ch := ps.Notify(nctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-nctx.Done():
					return
				case <-ch:
				}
				now := time.Now()
				tr.mu.Lock()
				tr.signals[i] = append(tr.signals[i], now)
				tr.mu.Unlock()
			}
		}()
		cfg := relay.Config{Owner: fmt.Sprintf("stage-%d", i), Logger: quiet, PollInterval: 500 * time.Millisecond,
			Hooks: []relay.Hook{&stageHook{tr: tr, id: i}}}
		r, err := relay.New(st, brokers[i], cfg)
		if err != nil {
			b.Fatal(err)
		}
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Run(rctx) }()
		stops = append(stops, func() { rcancel(); <-done; cancel(); wg.Wait() })
	}
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	time.Sleep(warmup) // shards balanced, relays idle
	pool, err := pgxpool.New(ctx, o.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	insert := "INSERT INTO " + o.Opts.Table + " (topic, event_key, event_type, payload) VALUES ('" + topic + "', $1, 'Plain', '{}') RETURNING id"
	// producers: 4 connections, each at rate/4
	var pw sync.WaitGroup
	every := time.Duration(4 * int64(time.Second) / int64(rate))
	total := 0
	for p := range 4 {
		n := int(dur / every)
		total += n
		pw.Add(1)
		go func() {
			defer pw.Done()
			next := time.Now()
			for i := range n {
				time.Sleep(time.Until(next))
				next = next.Add(every)
				var id int64
				if err := pool.QueryRow(ctx, insert, fmt.Sprintf("k%d", (i*4+p)%keys)).Scan(&id); err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				tr.mu.Lock()
				tr.get(id).commit = now
				tr.mu.Unlock()
			}
		}()
	}
	pw.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for {
		tr.mu.Lock()
		n := 0
		for _, e := range tr.ev {
			if !e.settled.IsZero() && !e.commit.IsZero() {
				n++
			}
		}
		tr.mu.Unlock()
		if n >= total {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d events settled after 30 s", n, total)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rows, err := pool.Query(ctx, "SELECT owner, count(*) FROM "+o.Opts.Table+"_shards GROUP BY owner")
	if err == nil {
		for rows.Next() {
			var ow string
			var n int
			_ = rows.Scan(&ow, &n)
			fmt.Printf("shards table: %q holds %d\n", ow, n)
		}
		rows.Close()
	}
	tr.report(b)
}

func (tr *stageTrace) report(b *testing.B) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	names := []string{"commit→signal", "signal→round", "round→call", "call→claimed", "claimed→publish", "publish→confirmed", "commit→confirmed", "confirmed→settled"}
	d := make([][]time.Duration, len(names))
	var misses []int
	empty := [2]int{}
	for i := range 2 {
		for _, c := range tr.calls[i] {
			if len(c.ids) == 0 {
				empty[i]++
			}
		}
	}
	for _, e := range tr.ev {
		sig := tr.signals[e.relay]
		k := sort.Search(len(sig), func(i int) bool { return !sig[i].Before(e.commit) })
		var s time.Time
		if k < len(sig) && sig[k].Before(e.round) {
			s = sig[k]
		} else {
			s = e.round // found by a recheck or a poll, not a signal
		}
		m := 0
		for _, c := range tr.calls[e.relay] {
			if c.start.After(e.commit) && c.start.Before(e.call) {
				m++
			}
		}
		misses = append(misses, m)
		for j, v := range []time.Duration{s.Sub(e.commit), e.round.Sub(s), e.call.Sub(e.round), e.claimed.Sub(e.call), e.pubStart.Sub(e.claimed), e.confirmed.Sub(e.pubStart), e.confirmed.Sub(e.commit), e.settled.Sub(e.confirmed)} {
			d[j] = append(d[j], v)
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "events=%d claims=%d/%d (empty %d/%d) signals=%d/%d shards %q\n", len(tr.ev), len(tr.calls[0]), len(tr.calls[1]), empty[0], empty[1], len(tr.signals[0]), len(tr.signals[1]), tr.shards)
	fmt.Fprintf(&sb, "%-18s %9s %9s %9s %9s\n", "stage", "p50", "p90", "p99", "max")
	for j, n := range names {
		v := d[j]
		slices.Sort(v)
		q := func(p float64) time.Duration { return v[min(len(v)-1, int(p*float64(len(v))))] }
		fmt.Fprintf(&sb, "%-18s %9v %9v %9v %9v\n", n, q(.5).Round(10*time.Microsecond), q(.9).Round(10*time.Microsecond), q(.99).Round(10*time.Microsecond), v[len(v)-1].Round(10*time.Microsecond))
	}
	var acquire, batches []time.Duration
	for i := range tr.pools {
		acquire = append(acquire, tr.pools[i].acquire...)
		batches = append(batches, tr.pools[i].claims...)
	}
	for _, x := range []struct {
		name string
		v    []time.Duration
	}{{"pool acquire", acquire}, {"claim batch", batches}} {
		if len(x.v) == 0 {
			continue
		}
		slices.Sort(x.v)
		q := func(p float64) time.Duration { return x.v[min(len(x.v)-1, int(p*float64(len(x.v))))] }
		fmt.Fprintf(&sb, "%-18s %9v %9v %9v %9v\n", x.name, q(.5).Round(10*time.Microsecond), q(.9).Round(10*time.Microsecond), q(.99).Round(10*time.Microsecond), x.v[len(x.v)-1].Round(10*time.Microsecond))
	}
	slices.Sort(misses)
	fmt.Fprintf(&sb, "claims of the owning relay between commit and the claim that took it: p50 %d p90 %d p99 %d max %d\n", misses[len(misses)/2], misses[len(misses)*9/10], misses[len(misses)*99/100], misses[len(misses)-1])
	fmt.Print(sb.String())
}

// poolTrace times, in one relay's pool (pgx's tracer hooks), every wait
// for a connection (pool acquire: any statement's) and every claim's
// batch from its sending to its results' close (claim batch: the round
// trip of the claim's six statements), so that a slow claim call can be
// told apart: a wait for a connection, or the database's round trip.
type poolTrace struct {
	mu      sync.Mutex
	acquire []time.Duration
	claims  []time.Duration
}

type (
	acquireStarted struct{}
	claimSent      struct{}
)

func (p *poolTrace) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (p *poolTrace) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (p *poolTrace) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	// a claim's batch: BEGIN, its settings, the expired claims' DELETE,
	// then the claim statement
	if d.Batch != nil && len(d.Batch.QueuedQueries) > 3 && strings.HasPrefix(d.Batch.QueuedQueries[3].SQL, "WITH held AS") {
		return context.WithValue(ctx, claimSent{}, time.Now())
	}
	return ctx
}

func (p *poolTrace) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (p *poolTrace) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	if at, ok := ctx.Value(claimSent{}).(time.Time); ok {
		p.mu.Lock()
		p.claims = append(p.claims, time.Since(at))
		p.mu.Unlock()
	}
}

func (p *poolTrace) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return context.WithValue(ctx, acquireStarted{}, time.Now())
}

func (p *poolTrace) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireEndData) {
	if at, ok := ctx.Value(acquireStarted{}).(time.Time); ok {
		p.mu.Lock()
		p.acquire = append(p.acquire, time.Since(at))
		p.mu.Unlock()
	}
}
