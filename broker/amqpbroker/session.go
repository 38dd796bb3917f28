package amqpbroker

import (
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
)

// A session is one channel in confirm mode (and, for Dial, the connection
// under it). Its publishes are numbered by delivery tag; its dispatcher
// goroutine is the only reader of the channel's confirms and returns.
//
// How a return is tied to its publish: RabbitMQ sends the basic.return of
// an unroutable mandatory message before the basic.ack of the same
// message, and amqp091-go's reader goroutine hands both to our listeners
// in the order they arrived, each send complete before the next frame is
// read. So when the dispatcher receives the confirm of a message, every
// return sent before it is already in the returns channel's buffer; the
// dispatcher drains that buffer first, then settles the confirm. A return
// carries no delivery tag, only the message's properties: it is matched by
// message-id (the event id), which is why a session never has two
// publishes of one event id awaiting a confirm at once (publish refuses the
// second one, transiently).
type session struct {
	conn  *amqp.Connection
	ch    *amqp.Channel
	owned bool // the connection is Dial's: shut closes it
	block *blockState

	pubMu   sync.Mutex // serializes publishes, so delivery tags are predictable
	nextTag uint64     // guarded by pubMu
	// window holds a token per publish awaiting its confirm
	// (Config.MaxPending): send takes one before each publish, the
	// dispatcher gives it back with the confirm.
	window chan struct{}

	mu       sync.Mutex
	pending  map[uint64]pendingPub // delivery tag → what awaits its confirm
	inflight map[string]struct{}   // event ids awaiting a confirm
	returned map[string]amqp.Return
	err      error         // why the session ended; set once
	done     chan struct{} // closed when the session ended
}

type pendingPub struct {
	c  *call
	i  int    // index in the call's events
	id string // the event id (message-id)
}

// blockState is what connection.blocked last said: RabbitMQ stops reading
// from publishers during a resource alarm (memory, disk), so a publish
// would hang in the socket write.
type blockState struct {
	mu     sync.Mutex
	reason string // "" when not blocked
}

func (bs *blockState) watch(c <-chan amqp.Blocking) {
	for bl := range c {
		bs.mu.Lock()
		bs.reason = ""
		if bl.Active {
			bs.reason = bl.Reason
			if bs.reason == "" {
				bs.reason = "a resource alarm"
			}
		}
		bs.mu.Unlock()
	}
}

func (bs *blockState) get() string {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return bs.reason
}

// open dials (for Dial) or opens a channel on the caller's connection (for
// New), puts the channel in confirm mode and starts its dispatcher.
func (b *Broker) open() (*session, error) {
	s := &session{
		pending:  map[uint64]pendingPub{},
		inflight: map[string]struct{}{},
		returned: map[string]amqp.Return{},
		done:     make(chan struct{}),
		nextTag:  1,
		window:   make(chan struct{}, b.cfg.MaxPending),
	}
	if b.conn == nil {
		conn, err := amqp.DialConfig(b.url, b.acfg)
		if err != nil {
			return nil, err
		}
		s.conn, s.owned = conn, true
		s.block = &blockState{}
		go s.block.watch(conn.NotifyBlocked(make(chan amqp.Blocking, 4)))
	} else {
		if b.conn.IsClosed() {
			return nil, errors.New("the connection given to New is closed; build a new Broker on a new connection")
		}
		s.conn = b.conn
		b.mu.Lock()
		if b.blocked == nil {
			b.blocked = &blockState{}
			go b.blocked.watch(b.conn.NotifyBlocked(make(chan amqp.Blocking, 4)))
		}
		s.block = b.blocked
		b.mu.Unlock()
	}
	ch, err := s.conn.Channel()
	if err != nil {
		s.shut()
		return nil, fmt.Errorf("open a channel: %w", err)
	}
	s.ch = ch
	if err := ch.Confirm(false); err != nil {
		s.shut()
		return nil, fmt.Errorf("put the channel in confirm mode: %w", err)
	}
	// Buffered so that amqp091-go's reader never waits on the dispatcher
	// (it drops a notification it could not deliver within 5s); the
	// dispatcher only moves entries between maps.
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 8192))
	returns := ch.NotifyReturn(make(chan amqp.Return, 1024))
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	go s.dispatch(confirms, returns, closes)
	return s, nil
}

// shut closes the channel, and the connection when the session owns it.
func (s *session) shut() {
	if s.ch != nil {
		_ = s.ch.Close()
	}
	if s.owned {
		_ = s.conn.Close()
	}
}

// dispatch settles confirms and records returns until the channel closes.
func (s *session) dispatch(confirms <-chan amqp.Confirmation, returns <-chan amqp.Return, closes <-chan *amqp.Error) {
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			s.noteReturn(r)
		case c, ok := <-confirms:
			if !ok {
				s.end(errors.New("the channel closed"))
				return
			}
			// Every return sent before this confirm is buffered already.
			for drained := false; !drained && returns != nil; {
				select {
				case r, ok := <-returns:
					if !ok {
						returns = nil
						break
					}
					s.noteReturn(r)
				default:
					drained = true
				}
			}
			s.confirm(c)
		case e, ok := <-closes:
			if ok && e != nil {
				s.end(e)
			} else {
				s.end(errors.New("the channel closed"))
			}
			return
		}
	}
}

func (s *session) noteReturn(r amqp.Return) {
	s.mu.Lock()
	if _, ok := s.inflight[r.MessageId]; ok {
		s.returned[r.MessageId] = r
	}
	s.mu.Unlock()
}

func (s *session) confirm(c amqp.Confirmation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pending[c.DeliveryTag]
	if !ok {
		return
	}
	delete(s.pending, c.DeliveryTag)
	delete(s.inflight, p.id)
	<-s.window
	r, returned := s.returned[p.id]
	delete(s.returned, p.id)
	if p.c.abandoned { // the caller gave up on it; its events are not ours to read
		p.c.settleLocked(p.i, nil)
		return
	}
	var err error
	if returned {
		err = unroutableError(p.c, p.i, r)
	} else if !c.Ack {
		e := &p.c.events[p.i]
		err = fmt.Errorf("amqpbroker: event %s on %q: %w: a queue refused it (overflow reject-publish, or an internal error); retried later", e.EventID, e.Topic, ErrNacked)
	}
	p.c.settleLocked(p.i, err)
}

func unroutableError(c *call, i int, r amqp.Return) error {
	e := &c.events[i]
	where := "the default exchange (which routes to the queue named like the routing key)"
	if r.Exchange != "" {
		where = fmt.Sprintf("exchange %q", r.Exchange)
	}
	return fmt.Errorf("amqpbroker: event %s: %w: RabbitMQ returned it (%d %s): no queue is bound to routing key %q on %s; declare and bind a queue (outbox broker setup --broker URL --queue NAME --topics %s); the relay retries it with backoff and after its max attempts the event goes DEAD as unroutable",
		e.EventID, ErrUnroutable, r.ReplyCode, r.ReplyText, r.RoutingKey, where, e.Topic)
}

// end fails every publish still awaiting its confirm with why (wrapping
// broker.ErrUnavailable: the message may or may not have been stored, and
// the relay gives the events back) and marks the session done. Only the
// first call counts.
func (s *session) end(why error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	if !errors.Is(why, broker.ErrUnavailable) {
		why = fmt.Errorf("amqpbroker: the channel to RabbitMQ closed (%v) (%w)", why, broker.ErrUnavailable)
	}
	s.err = why
	for tag, p := range s.pending {
		delete(s.pending, tag)
		if p.c.abandoned {
			p.c.settleLocked(p.i, nil)
			continue
		}
		e := &p.c.events[p.i]
		p.c.settleLocked(p.i, fmt.Errorf("amqpbroker: event %s on %q not confirmed: %w; it reconnects by itself, retry later", e.EventID, e.Topic, why))
	}
	clear(s.inflight)
	clear(s.returned)
	close(s.done)
}

// A call is one Publish: its results, and how many of its events still
// await a confirm. Its fields are guarded by the session's mu.
type call struct {
	events    []outbox.Event // the caller's; read only while not abandoned
	results   []error
	waiting   []bool
	left      int // events awaiting a confirm, plus 1 while sending
	abandoned bool
	done      chan struct{}
}

// settleLocked records event i's result. s.mu is held.
func (c *call) settleLocked(i int, err error) {
	if !c.waiting[i] {
		return
	}
	c.waiting[i] = false
	if !c.abandoned {
		c.results[i] = err
	}
	c.left--
	if c.left == 0 {
		close(c.done)
	}
}

// endErr is why the session ended (nil while it lives).
func (s *session) endErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
