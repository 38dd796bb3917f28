package natsbroker

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// replies is the Broker's one reply subscription: every PubAck of every
// Publish comes to <inbox>.<call>.<group> on a wildcard subscription to
// <inbox>.*.*, made at the first Publish and dropped by Close. A call
// registers under a number of its own while it runs; a reply for a number
// not registered (a call that ended, or a forged subject) is dropped.
// Subscribing per call instead costs a SUB and an UNSUB to nats-server and
// a goroutine in nats.go for every Publish, which is most of a one-event
// call's cost.
//
// nats.go's reading goroutine puts the replies in a channel, and the calls
// waiting for PubAcks take them from it (call.wait), each handing a reply
// to the call it names: no goroutine of its own, so a call waiting alone
// (the relay's one hot key) is woken by the reading goroutine directly, as
// a plain request is. A reply comes only for a message some call sent and
// awaits, and a call awaits until its replies are in, so every reply is
// taken; those of a call that gave up are taken by the next one. The
// channel holds twice Config.MaxPending replies (the window bounds the
// replies awaited); should it fill, nats.go drops the reply (a slow
// consumer) and its call fails at its deadline, to be retried.
//
// Close drops the subscription while calls may still wait (its ctx ended
// first): no reply can reach them any more, so close also closes gone,
// and each waiting call takes the replies already in the channel, then
// gives up on the rest with ErrClosed at once (call.wait) instead of
// waiting out its Timeout.
type replies struct {
	nc   *nats.Conn
	size int // the channel's capacity

	mu     sync.Mutex
	sub    *nats.Subscription
	ch     chan *nats.Msg // the subscription's
	prefix string         // the subscription's <inbox>.
	next   uint64         // the next call's number
	calls  map[uint64]*call
	closed bool          // Close dropped the subscription
	gone   chan struct{} // closed with closed: the waiting calls give up
}

func newReplies(nc *nats.Conn, size int) *replies {
	return &replies{nc: nc, size: size, gone: make(chan struct{})}
}

// register gives c a number, the prefix of its reply subjects
// (<inbox>.<number>.) and the subscription to wait on, subscribing first
// if there is no subscription yet (or it ended). end unregisters the
// number.
func (r *replies) register(c *call) (uint64, string, inbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, "", inbox{}, ErrClosed
	}
	if r.sub == nil || !r.sub.IsValid() {
		prefix := r.nc.NewInbox() + "."
		ch := make(chan *nats.Msg, r.size)
		sub, err := r.nc.ChanSubscribe(prefix+"*.*", ch)
		if err != nil {
			return 0, "", inbox{}, err
		}
		if r.calls == nil {
			r.calls = make(map[uint64]*call)
		}
		r.sub, r.ch, r.prefix = sub, ch, prefix
	}
	id := r.next
	r.next++
	r.calls[id] = c
	return id, r.prefix + strconv.FormatUint(id, 10) + ".", inbox{r, r.prefix, r.ch, r.gone}, nil
}

// inbox is the subscription a call waits on: its replies, and those of
// every other call.
type inbox struct {
	r      *replies
	prefix string
	ch     <-chan *nats.Msg
	gone   <-chan struct{} // closed when Close drops the subscription
}

// dropped reports whether Close dropped the subscription.
func (in inbox) dropped() bool {
	select {
	case <-in.gone:
		return true
	default:
		return false
	}
}

// drain hands the replies already in the channel to their calls, without
// waiting for more: after Close no more come.
func (in inbox) drain() {
	for {
		select {
		case m := <-in.ch:
			in.dispatch(m)
		default:
			return
		}
	}
}

// dispatch hands the reply m to its call.
func (in inbox) dispatch(m *nats.Msg) { in.r.dispatch(in.prefix, m) }

// unregister forgets call id: its later replies are dropped.
func (r *replies) unregister(id uint64) {
	r.mu.Lock()
	delete(r.calls, id)
	r.mu.Unlock()
}

// dispatch hands the reply m, which came on the subscription to
// prefix+"*.*", to its call. It runs on the goroutine of whichever call
// took m, so what it calls must not block (see call.onAck).
func (r *replies) dispatch(prefix string, m *nats.Msg) {
	rest, ok := strings.CutPrefix(m.Subject, prefix)
	if !ok {
		return
	}
	callNum, groupNum, ok := strings.Cut(rest, ".")
	if !ok {
		return
	}
	id, err := strconv.ParseUint(callNum, 10, 64)
	if err != nil {
		return
	}
	g, err := strconv.Atoi(groupNum)
	if err != nil {
		return
	}
	r.mu.Lock()
	c := r.calls[id]
	if prefix != r.prefix {
		c = nil // a reply to a subscription that was replaced
	}
	r.mu.Unlock()
	if c != nil {
		c.onAck(g, m)
	}
}

// close drops the subscription and tells the calls still waiting (gone);
// later calls fail with ErrClosed.
func (r *replies) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		close(r.gone)
	}
	r.closed = true
	if r.sub != nil {
		_ = r.sub.Unsubscribe() // fails only on a closed connection: gone anyway
		r.sub = nil
	}
}

// watch tells the calls in flight that the connection was lost: the acks
// of a lost connection never come, and nats.go re-subscribes after a
// reconnect, so a call must not wait for them. One goroutine per Broker
// looks at the connection every connCheck while calls are in flight, and
// stops at the first look with none. Each call joins the current epoch: a
// channel closed when the connection is seen not connected, or reconnected
// since the epoch began; a call that joins after a reconnect starts a new
// epoch.
type watch struct {
	// state reports the connection's status and reconnect count.
	state func() (nats.Status, uint64)

	mu         sync.Mutex
	calls      int           // calls joined and not left
	lost       chan struct{} // the current epoch's; closed when the connection is lost
	reconnects uint64        // the reconnect count when the current epoch began
	running    bool          // the goroutine runs
	exited     chan struct{} // closed when the last goroutine started stops
}

func newWatch(nc *nats.Conn) *watch {
	return &watch{state: func() (nats.Status, uint64) { return nc.Status(), nc.Stats().Reconnects }}
}

// join counts a call in flight and returns the channel closed when the
// connection is lost. The call must leave.
func (w *watch) join() <-chan struct{} {
	_, n := w.state()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lost == nil || n != w.reconnects {
		w.newEpochLocked(n)
	}
	w.calls++
	if !w.running {
		w.running, w.exited = true, make(chan struct{})
		go w.run(w.exited)
	}
	return w.lost
}

// leave ends a call that joined.
func (w *watch) leave() {
	w.mu.Lock()
	w.calls--
	w.mu.Unlock()
}

// newEpochLocked closes the current epoch's channel, if any, and begins
// another at reconnect count n. w.mu is held.
func (w *watch) newEpochLocked(n uint64) {
	if w.lost != nil {
		close(w.lost)
	}
	w.lost, w.reconnects = make(chan struct{}), n
}

// run looks at the connection every connCheck until a look finds no call
// in flight.
func (w *watch) run(exited chan struct{}) {
	defer close(exited)
	t := time.NewTicker(connCheck)
	defer t.Stop()
	for range t.C {
		if !w.look() {
			return
		}
	}
}

// look ends the epoch if the connection was lost, and reports whether
// calls are in flight; when none are, the goroutine stops (join starts
// another).
func (w *watch) look() bool {
	st, n := w.state()
	w.mu.Lock()
	defer w.mu.Unlock()
	if st != nats.CONNECTED || n != w.reconnects {
		w.newEpochLocked(n)
	}
	if w.calls > 0 {
		return true
	}
	w.running = false
	return false
}

// stopped returns a channel closed once the goroutine has stopped (within
// connCheck of the last call leaving), nil if none ever ran.
func (w *watch) stopped() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.exited
}
