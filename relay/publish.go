package relay

import (
	"context"
	"fmt"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// publish runs one publish call, for a store's batch or a source's set
// alike: it waits for room in the broker's in-flight window, then
// publishes under PublishTimeout with the publish hooks, and returns one
// result per event. stopped: pubCtx ended while waiting for room, and
// nothing was sent. It touches no outcome, so several calls may run at
// once.
func (r *Relay) publish(pubCtx context.Context, send []outbox.Event) (results []broker.Result, stopped bool) {
	// Room in the broker's in-flight window is waited for before the
	// publish deadline starts: a wait is not an attempt.
	release, stop := r.inFlightWindow(pubCtx, len(send))
	if stop {
		return nil, true
	}
	ctx, cancel := context.WithTimeout(pubCtx, r.cfg.PublishTimeout)
	defer cancel()
	for _, h := range r.hooks.publishStart {
		if c := h.OnPublishStart(ctx, send); c != nil {
			ctx = c
		}
	}
	published := time.Now()
	results = broker.PublishResults(ctx, r.br, send)
	release()
	if len(results) != len(send) {
		// a broken adapter: nothing it said can be trusted, and a missing
		// result must never count as confirmed
		bad := fmt.Errorf("broker %T returned %d results for %d events", r.br, len(results), len(send))
		results = make([]broker.Result, len(send))
		for i := range results {
			results[i] = broker.Result{Err: bad, Offset: -1}
		}
	}
	for _, h := range r.hooks.publishEnd {
		h.OnPublishEnd(ctx, PublishInfo{Events: send, Results: results, Took: time.Since(published)})
	}
	return results, false
}
