package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/source"
)

// NewSource returns a relay that delivers a source.Source's events (a log
// tail such as source/pgcdc, or source/pollsource) through br, with
// source.Loop (see the source package doc for its rules; it publishes
// through the same per-key dispatcher as the relay's engines). The
// relay's hooks, Health and Totals work as for a store: a Next is a claim
// (HookClaim), each publish call goes to HookPublishStart and
// HookPublishEnd, each call's outcomes to HookSettle (Released counts the
// events held back untried), and the source's Park and Ack failures set
// the store's health. There are no leases per batch (HookLease and
// HookShards are not called): a source fences itself. cfg's BatchSize,
// Workers (publish calls in flight), PublishTimeout, MaxAttempts,
// BackoffBase, BackoffMax, DrainTimeout, Logger and Hooks apply; Owner,
// LeaseFor and PollInterval belong to the source, and a source's DEAD event
// never holds its key (DeadKeys is ignored).
//
// Unlike a store's relay, Run returns the source's failure, such as
// source.ErrFenced when another process took the stream over.
func NewSource(src source.Source, br broker.Broker, cfg Config) (*Relay, error) {
	if src == nil || br == nil {
		return nil, errors.New("relay: NewSource needs a source and a broker")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Relay{br: br, cfg: cfg, wake: make(chan struct{}, 1)}
	r.features = broker.FeaturesOf(br)
	r.hooks = sortHooks(cfg.Hooks)
	r.health.log = cfg.Logger
	r.health.hooks = r.hooks.health
	r.health.store.name, r.health.broker.name = "store", "broker"
	var err error
	r.loop, err = source.New(src, br, source.Config{
		BatchSize: cfg.BatchSize, InFlight: cfg.Workers, PublishTimeout: cfg.PublishTimeout,
		MaxAttempts: cfg.MaxAttempts, BackoffBase: cfg.BackoffBase, BackoffMax: cfg.BackoffMax,
		DrainTimeout: cfg.DrainTimeout, Logger: cfg.Logger, Observer: r.observer(),
	})
	if err != nil {
		return nil, fmt.Errorf("relay: %s", strings.TrimPrefix(err.Error(), "source: "))
	}
	return r, nil
}

// runSource is Run for a relay made by NewSource.
func (r *Relay) runSource(ctx context.Context) error {
	return r.loop.Run(ctx)
}

// observer feeds the loop's doings to the relay's hooks, health and
// counters.
func (r *Relay) observer() *source.Observer {
	return &source.Observer{
		Read: func(ctx context.Context, txns []source.Txn, took time.Duration, err error) {
			var evs []outbox.Event
			for _, t := range txns {
				evs = append(evs, t.Events...)
			}
			for _, h := range r.hooks.claim {
				h.OnClaim(ctx, ClaimInfo{Events: evs, Took: took, Err: err})
			}
			if err != nil {
				if !errors.Is(err, source.ErrFenced) {
					r.health.set(&r.health.store, fmt.Errorf("reading the source: %w", err))
				}
				return
			}
			r.health.set(&r.health.store, nil)
			stamp(&r.lastClaim)
			r.totals.Claimed.Add(int64(len(evs)))
			r.inFlight.Add(int64(len(evs)))
		},
		PublishStart: func(ctx context.Context, events []outbox.Event) context.Context {
			for _, h := range r.hooks.publishStart {
				if c := h.OnPublishStart(ctx, events); c != nil {
					ctx = c
				}
			}
			return ctx
		},
		PublishEnd: func(ctx context.Context, events []outbox.Event, results []broker.Result, took time.Duration) {
			for _, h := range r.hooks.publishEnd {
				h.OnPublishEnd(ctx, PublishInfo{Events: events, Results: results, Took: took})
			}
			var first error
			ok := false
			for _, res := range results {
				if res.Err == nil {
					ok = true
				} else if first == nil {
					first = res.Err
				}
			}
			switch {
			case ok:
				r.health.set(&r.health.broker, nil)
			case first != nil && !broker.IsPermanent(first):
				r.health.set(&r.health.broker, first)
			}
		},
		Settled: func(ctx context.Context, s source.Settled) {
			r.inFlight.Add(-int64(s.Delivered + s.Dead))
			if s.Delivered > 0 {
				stamp(&r.lastDelivered)
			}
			if s.Events > s.Held || s.Took > 0 { // a call, not events given back without one
				r.totals.Batches.Add(1)
			}
			r.totals.Delivered.Add(int64(s.Delivered))
			r.totals.Retried.Add(int64(s.Retried))
			r.totals.Dead.Add(int64(s.Dead))
			r.totals.Released.Add(int64(s.Held))
			rep := BatchReport{Claimed: s.Events, Delivered: s.Delivered, Retried: s.Retried, Dead: s.Dead, Released: s.Held, Duration: s.Took}
			for _, h := range r.hooks.settle {
				h.OnSettle(ctx, rep)
			}
		},
		Acked: func(_ context.Context, _ source.Position, _ int, err error) {
			if errors.Is(err, source.ErrFenced) {
				return
			}
			if err != nil {
				err = fmt.Errorf("acknowledging to the source: %w", err)
			}
			r.health.set(&r.health.store, err)
		},
	}
}
