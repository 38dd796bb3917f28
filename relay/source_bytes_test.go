package relay_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/source"
)

// dripSource hands out its transactions one per Next, and counts the
// events it handed out.
type dripSource struct {
	memSource
	mu     sync.Mutex
	left   []source.Txn
	handed int
}

func (s *dripSource) Next(ctx context.Context) ([]source.Txn, error) {
	s.mu.Lock()
	if len(s.left) > 0 {
		t := s.left[0]
		s.left = s.left[1:]
		s.handed += len(t.Events)
		s.mu.Unlock()
		return []source.Txn{t}, nil
	}
	s.mu.Unlock()
	<-ctx.Done()
	return nil, ctx.Err()
}

func (s *dripSource) handedOut() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handed
}

// closedBroker is a membroker whose calls wait until open is closed.
type closedBroker struct {
	*membroker.Broker
	open chan struct{}
}

func (b closedBroker) PublishResults(ctx context.Context, evs []outbox.Event) []broker.Result {
	select {
	case <-b.open:
	case <-ctx.Done():
	}
	return b.Broker.PublishResults(ctx, evs)
}

func (b closedBroker) Publish(ctx context.Context, evs []outbox.Event) []error {
	return errsOf(b.PublishResults(ctx, evs))
}

// Over a source, the relay reads no more while the events it holds weigh
// MaxInflightBytes: with 64 KiB events, a budget of 256 KiB and a broker
// that confirms nothing, it takes four events and the one read under way,
// and the rest once the broker confirms.
func TestSourceReadsNoMorePastMaxInflightBytes(t *testing.T) {
	const event, budget, n = 64 << 10, 256 << 10, 20
	src := &dripSource{}
	for i := range n {
		tx := txn(source.Position(i+1), "")
		tx.Events[0].Payload = []byte(strings.Repeat("x", event))
		src.left = append(src.left, tx)
	}
	b := closedBroker{Broker: newBroker(t, membroker.Config{}), open: make(chan struct{})}
	r, err := relay.NewSource(src, b, fast(relay.Config{MaxInflightBytes: budget}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor(t, "the relay to hold the budget", 10*time.Second, func() bool { return r.Health().InflightBytes >= budget })
	time.Sleep(100 * time.Millisecond) // it would read more meanwhile
	if got, most := src.handedOut(), budget/event+1; got > most {
		t.Errorf("the source handed out %d events while the broker confirmed none; want at most %d (the budget's %d and the read under way)", got, most, budget/event)
	}
	if held := r.Health().InflightBytes; held > budget+event {
		t.Errorf("the relay holds %d payload bytes; want at most %d", held, budget+event)
	}
	close(b.open)
	waitFor(t, "every event delivered", 10*time.Second, func() bool { return len(b.Events("t")) == n })
	waitFor(t, "the bytes held to go back to 0", 10*time.Second, func() bool { return r.Health().InflightBytes == 0 })
}
