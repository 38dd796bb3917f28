package membroker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

var (
	// ErrDown is every event's result while the broker is SetDown(true).
	// It is transient: the relay retries.
	ErrDown = fmt.Errorf("membroker: broker is down (simulated outage; %w)", broker.ErrUnavailable)
	// ErrClosed is every event's result after Close. It is transient, so a
	// relay that is shutting down does not bury events.
	ErrClosed = fmt.Errorf("membroker: broker is closed (%w)", broker.ErrUnavailable)
	// ErrInjected is the result FailNext uses when given a nil error.
	ErrInjected = errors.New("membroker: injected failure")
	// ErrHeld is the result of an event held back because an earlier event
	// of its key failed in the same Publish call (only with
	// Config.KeyOrdered).
	ErrHeld = errors.New("membroker: an earlier event of this key failed in the same batch")
)

// Config configures a Broker. The zero value is ready to use.
type Config struct {
	// MaxPayload is the largest payload plus user headers (names and
	// values), in bytes, the broker accepts; a larger event gets a permanent
	// error. Default outbox.DefaultMaxPayload (1 MiB).
	MaxPayload int
	// KeyOrdered makes the broker keep a key's order within a call
	// (Features().Ordering is broker.OrderKey): once an event fails, the
	// later events of its key in the same Publish call fail too (with
	// ErrHeld). Default false: OrderNone.
	KeyOrdered bool
	// Dedup confirms an event whose EventID was already delivered without
	// recording it again, like a broker's duplicate detection. Default
	// false: every delivery is recorded, so a test can count duplicates.
	Dedup bool
	// Latency delays every Publish call, honouring its context. Default 0.
	// SetLatency changes it later.
	Latency time.Duration
	// MaxInFlight is declared in Features, for relays to bound the events
	// they publish at once; the broker itself does not enforce it, but
	// counts in Stats.PeakInFlight how many it saw at once. Default 0 (no
	// bound declared).
	MaxInFlight int
}

// Stats counts what the broker has done since New or Reset.
type Stats struct {
	Calls     int // Publish calls, including empty and failed ones
	Confirmed int // events confirmed (nil result), duplicates included
	Failed    int // events with a non-nil result
	// PeakInFlight is the most events inside concurrent Publish calls at
	// one moment.
	PeakInFlight int
}

// Broker is an in-memory broker.Broker. It is safe for concurrent use.
type Broker struct {
	cfg Config

	mu        sync.Mutex
	closed    bool
	down      bool
	latency   time.Duration
	failN     int
	failErr   error
	hook      func(outbox.Event) error
	delivered []outbox.Event
	seen      map[string]bool // EventIDs delivered, for Dedup
	stats     Stats
	changed   chan struct{} // closed and replaced whenever delivered grows
	inFlight  int           // events inside Publish calls now
}

var (
	_ broker.Broker          = (*Broker)(nil)
	_ broker.Describer       = (*Broker)(nil)
	_ broker.ResultPublisher = (*Broker)(nil)
	_ broker.Checker         = (*Broker)(nil)
)

// New returns an empty, running Broker.
func New(cfg Config) (*Broker, error) {
	if cfg.MaxPayload < 0 {
		return nil, fmt.Errorf("membroker: Config.MaxPayload is %d; use 0 for the default (%d) or a positive size", cfg.MaxPayload, outbox.DefaultMaxPayload)
	}
	if cfg.Latency < 0 {
		return nil, fmt.Errorf("membroker: Config.Latency is %v; use 0 or a positive duration", cfg.Latency)
	}
	if cfg.MaxInFlight < 0 {
		return nil, fmt.Errorf("membroker: Config.MaxInFlight is %d; use 0 (none declared) or a positive bound", cfg.MaxInFlight)
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = outbox.DefaultMaxPayload
	}
	return &Broker{
		cfg:     cfg,
		latency: cfg.Latency,
		seen:    make(map[string]bool),
		changed: make(chan struct{}),
	}, nil
}

// Publish records each event under its topic, in order, unless an injected
// failure, the size limit, a closed broker or ctx decides otherwise. Like
// a real adapter it refuses, as permanent, an event that is not a valid
// CloudEvent or carries a header any transport reserves
// (broker.CheckEvent with every transport's names, what outbox.Validate
// refuses at enqueue). It returns one result per event.
func (b *Broker) Publish(ctx context.Context, events []outbox.Event) []error {
	res := b.PublishResults(ctx, events)
	errs := make([]error, len(res))
	for i := range res {
		errs[i] = res[i].Err
	}
	return errs
}

// Features declares the broker's ordering unit (OrderKey with
// Config.KeyOrdered, else OrderNone) and its MaxPayload as the largest
// message.
func (b *Broker) Features() broker.Features {
	f := broker.Features{MaxMessage: b.cfg.MaxPayload, MaxInFlight: b.cfg.MaxInFlight}
	if b.cfg.KeyOrdered {
		f.Ordering = broker.OrderKey
	}
	return f
}

// PublishResults is Publish with a Result per event: a confirmed event's
// Stream is its topic and its Sequence its position among everything the
// broker recorded (from 1); a duplicate that Config.Dedup absorbed is
// marked Duplicate and carries no sequence.
func (b *Broker) PublishResults(ctx context.Context, events []outbox.Event) []broker.Result {
	b.mu.Lock()
	b.stats.Calls++
	latency := b.latency
	b.inFlight += len(events)
	b.stats.PeakInFlight = max(b.stats.PeakInFlight, b.inFlight)
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.inFlight -= len(events)
		b.mu.Unlock()
	}()
	if len(events) == 0 {
		return []broker.Result{}
	}
	if latency > 0 {
		timer := time.NewTimer(latency)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
		}
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	var whole error
	switch {
	case b.closed:
		whole = ErrClosed
	case ctx.Err() != nil:
		whole = fmt.Errorf("membroker: not published: %w", ctx.Err())
	case b.down:
		whole = ErrDown
	}
	if whole != nil {
		b.stats.Failed += len(events)
		results := make([]broker.Result, len(events))
		for i := range results {
			results[i] = broker.Result{Err: whole, Offset: -1}
		}
		return results
	}

	results := make([]broker.Result, len(events))
	failedKeys := make(map[string]bool)
	grew := false
	for i := range events {
		e := &events[i]
		err := b.publishOne(e, failedKeys)
		results[i] = broker.Result{Err: err, Offset: -1}
		if err != nil {
			b.stats.Failed++
			if e.Key != "" {
				failedKeys[e.Key] = true
			}
			continue
		}
		b.stats.Confirmed++
		if b.cfg.Dedup && b.seen[e.EventID] {
			results[i].Duplicate = true
			continue
		}
		b.seen[e.EventID] = true
		b.delivered = append(b.delivered, clone(*e))
		results[i].Stream, results[i].Sequence = e.Topic, uint64(len(b.delivered))
		grew = true
	}
	if grew {
		close(b.changed)
		b.changed = make(chan struct{})
	}
	return results
}

// publishOne decides one event's fate. b.mu is held.
func (b *Broker) publishOne(e *outbox.Event, failedKeys map[string]bool) error {
	if b.cfg.KeyOrdered && e.Key != "" && failedKeys[e.Key] {
		return ErrHeld
	}
	if err := broker.CheckEvent("", e); err != nil {
		return broker.Permanentf("membroker: event %s: %w", e.EventID, err)
	}
	if n := size(&e.Message); n > b.cfg.MaxPayload {
		return broker.Permanentf("membroker: event %s: its payload plus user headers take %d bytes, above MaxPayload %d", e.EventID, n, b.cfg.MaxPayload)
	}
	if b.failN > 0 {
		b.failN--
		if b.failErr != nil {
			return b.failErr
		}
		return ErrInjected
	}
	if b.hook != nil {
		if err := b.hook(clone(*e)); err != nil {
			return err
		}
	}
	return nil
}

// Check implements broker.Checker: it refuses a message whose payload plus
// user headers exceed Config.MaxPayload, as Publish would.
func (b *Broker) Check(m outbox.Message) error {
	if n := size(&m); n > b.cfg.MaxPayload {
		return &outbox.ValidationError{Field: "Payload", Err: outbox.ErrPayloadTooLarge,
			Fix: fmt.Sprintf("with its headers it takes %d bytes, above the broker's MaxPayload of %d", n, b.cfg.MaxPayload)}
	}
	return nil
}

// size is what counts against Config.MaxPayload: the payload and the user
// headers' names and values, as a real broker counts its headers too.
func size(m *outbox.Message) int {
	n := len(m.Payload)
	for k, v := range m.Headers {
		n += len(k) + len(v)
	}
	return n
}

// Close makes every later Publish fail with ErrClosed. Recorded events stay
// readable. Safe to call more than once.
func (b *Broker) Close(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

// SetDown simulates an outage: while down, every event fails with ErrDown.
func (b *Broker) SetDown(down bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.down = down
}

// FailNext makes the next n events (counted across Publish calls, after the
// size check) fail with err, or with ErrInjected when err is nil. It
// replaces any earlier FailNext that has not run out.
func (b *Broker) FailNext(n int, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failN = max(n, 0)
	b.failErr = err
}

// SetHook installs fn, called with a copy of every event that passed the
// other checks; a non-nil result becomes that event's result (use
// broker.Permanent for a poison event). fn runs with the broker locked: it
// must not call the Broker's methods. A nil fn removes the hook.
func (b *Broker) SetHook(fn func(outbox.Event) error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hook = fn
}

// SetLatency changes the delay of every later Publish call.
func (b *Broker) SetLatency(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.latency = max(d, 0)
}

// Events returns copies of the events delivered to topic, in delivery
// order; an empty topic means all topics.
func (b *Broker) Events(topic string) []outbox.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eventsLocked(topic)
}

func (b *Broker) eventsLocked(topic string) []outbox.Event {
	out := []outbox.Event{}
	for _, e := range b.delivered {
		if topic == "" || e.Topic == topic {
			out = append(out, clone(e))
		}
	}
	return out
}

// Wait blocks until at least n events were delivered to topic (all topics
// when topic is empty) and returns copies of all of them, or returns ctx's
// error with what has arrived so far.
func (b *Broker) Wait(ctx context.Context, topic string, n int) ([]outbox.Event, error) {
	for {
		b.mu.Lock()
		got := b.eventsLocked(topic)
		changed := b.changed
		b.mu.Unlock()
		if len(got) >= n {
			return got, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return got, fmt.Errorf("membroker: %d of %d events on topic %q: %w", len(got), n, topic, ctx.Err())
		}
	}
}

// Changed returns a channel that is closed at the next delivery.
func (b *Broker) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// Stats returns the counters.
func (b *Broker) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// Reset forgets the delivered events, the dedup memory and the counters.
// Injected failures, latency and the closed state stay.
func (b *Broker) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.delivered = nil
	b.seen = make(map[string]bool)
	b.stats = Stats{}
}

func clone(e outbox.Event) outbox.Event {
	if e.Payload != nil {
		e.Payload = append([]byte{}, e.Payload...)
	}
	if e.Headers != nil {
		e.Headers = maps.Clone(e.Headers)
	}
	return e
}
