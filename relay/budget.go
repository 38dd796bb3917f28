package relay

import (
	"sync"
	"sync/atomic"

	outbox "github.com/outbox-go/outbox"
)

// budget counts the payload bytes a relay holds: claimed (or read from a
// source) and not settled yet, against Config.MaxInflightBytes. A claim
// starts only while some bytes are left and asks the store for at most
// those; the store returns at least one event, so the relay holds at most
// the budget plus one event.
type budget struct {
	max  int64
	held atomic.Int64

	mu    sync.Mutex
	freed chan struct{} // closed by the next give; nil while nobody waits
}

// take counts n more bytes held.
func (b *budget) take(n int64) { b.held.Add(n) }

// give counts n bytes settled, and wakes whoever waits for room.
func (b *budget) give(n int64) {
	if n == 0 {
		return
	}
	b.held.Add(-n)
	b.mu.Lock()
	if b.freed != nil {
		close(b.freed)
		b.freed = nil
	}
	b.mu.Unlock()
}

// room returns the bytes left under the budget; when none are, also a
// channel that is closed once some are given back.
func (b *budget) room() (left int64, freed <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if left = b.max - b.held.Load(); left > 0 {
		return left, nil
	}
	if b.freed == nil {
		b.freed = make(chan struct{})
	}
	return left, b.freed
}

// payloadBytes sums the events' payload lengths: what the budget counts.
func payloadBytes(events []outbox.Event) int64 {
	var n int64
	for _, e := range events {
		n += int64(len(e.Payload))
	}
	return n
}
