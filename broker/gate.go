package broker

import (
	"context"
	"fmt"
	"sync"
)

// Gate admits an adapter's Publish calls until Close, and lets Close wait
// for the calls in progress: the shutdown every adapter needs (a publish
// that began is answered; one that comes after Close fails at once). The
// zero Gate is open. An adapter keeps one in its Broker and calls Enter
// and Leave around each Publish.
type Gate struct {
	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup
	done     chan struct{} // made by the first Close, closed when it returns
}

// Enter admits one call and reports true, or reports false once Close has
// begun. Every true is paired with one Leave.
func (g *Gate) Enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.inflight.Add(1)
	return true
}

// Leave ends a call that Enter admitted.
func (g *Gate) Leave() { g.inflight.Done() }

// Closed reports whether Close has begun.
func (g *Gate) Closed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// Close shuts the gate, waits for the calls in progress until ctx ends,
// then runs release (nil: nothing to release), which closes what the
// adapter owns. If ctx ended first, the error says so, beginning with
// waiting (e.g. "natsbroker: closing with publishes still waiting for
// PubAcks"); otherwise it is release's. A later Close waits for the first
// to finish, or for its own ctx, and returns nil.
func (g *Gate) Close(ctx context.Context, waiting string, release func() error) error {
	g.mu.Lock()
	if g.closed {
		done := g.done
		g.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
		}
		return nil
	}
	g.closed = true
	g.done = make(chan struct{})
	g.mu.Unlock()
	defer close(g.done)

	idle := make(chan struct{})
	go func() {
		g.inflight.Wait()
		close(idle)
	}()
	var err error
	select {
	case <-idle:
	case <-ctx.Done():
		err = fmt.Errorf("%s (they fail and will be retried): %w", waiting, ctx.Err())
	}
	if release != nil {
		if rerr := release(); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}
