package faultproxy

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy on a loopback port with the network faults the
// torture run injects: latency on every chunk, a pause that holds bytes in
// flight (a blackhole; the peers see a stalled connection), a reset of every
// connection (RST on both sides, bytes in flight lost), and a reset armed to
// fire right after a client chunk containing a pattern was forwarded (for
// NATS "PUB ": the message reaches the broker, its acknowledgement is lost).
//
// It is a small stand-in for Shopify/toxiproxy, kept in-process so that a
// fault is one method call and no extra dependency reaches the module.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	links   map[*link]struct{}
	latency time.Duration
	resume  chan struct{} // nil when not paused; closed on Resume
	resetOn []byte        // armed pattern, nil when not armed
	closed  bool

	resets atomic.Int64 // connections reset so far
	wg     sync.WaitGroup
}

type link struct {
	client, server net.Conn
	once           sync.Once
	gone           chan struct{}
	halfClosed     atomic.Int32 // directions whose source closed
	// cut is set before a chunk that fires ResetAfter goes up, so that no
	// reply to it comes down before the reset does.
	cut atomic.Bool
}

// reset closes both sides with SO_LINGER 0, so the peers get a RST.
func (l *link) reset() {
	l.once.Do(func() {
		for _, c := range []net.Conn{l.client, l.server} {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
		}
		close(l.gone)
	})
}

// New listens on 127.0.0.1 and forwards every connection to target
// (host:port).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Resets is how many connections the proxy reset so far.
func (p *Proxy) Resets() int64 { return p.resets.Load() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{client: c, server: s, gone: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.reset()
			return
		}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(l, c, s, true)
		go p.pipe(l, s, c, false)
	}
}

// pipe copies src to dst chunk by chunk, applying the faults in force.
func (p *Proxy) pipe(l *link, src, dst net.Conn, up bool) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.hold(l) {
				return
			}
			if d := p.currentLatency(); d > 0 {
				select {
				case <-time.After(d):
				case <-l.gone:
					return
				}
			}
			fire := up && p.fire(buf[:n])
			if fire {
				l.cut.Store(true)
			}
			if !up && l.cut.Load() {
				l.reset()
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				l.reset()
				return
			}
			if fire {
				p.resets.Add(1)
				l.reset()
				return
			}
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				l.reset()
				return
			}
			// The peer closed its side: pass the close on, so a request
			// sent before it (a COMMIT) still reaches the server.
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			if l.halfClosed.Add(1) == 2 {
				l.reset() // both sides are done
				return
			}
			select {
			case <-l.gone:
			case <-time.After(30 * time.Second):
				l.reset()
			}
			return
		}
	}
}

// hold blocks while the proxy is paused; false when the link went away.
func (p *Proxy) hold(l *link) bool {
	for {
		p.mu.Lock()
		ch := p.resume
		p.mu.Unlock()
		if ch == nil {
			select {
			case <-l.gone:
				return false
			default:
				return true
			}
		}
		select {
		case <-ch:
		case <-l.gone:
			return false
		}
	}
}

func (p *Proxy) currentLatency() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency
}

func (p *Proxy) fire(chunk []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resetOn != nil && bytes.Contains(chunk, p.resetOn)
}

// SetLatency delays every chunk in both directions by d (0 turns it off).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Pause stops forwarding: bytes wait in the socket buffers and the peers
// see a connection that has gone silent. New connections are accepted but
// stall the same way.
func (p *Proxy) Pause() {
	p.mu.Lock()
	if p.resume == nil {
		p.resume = make(chan struct{})
	}
	p.mu.Unlock()
}

// Resume forwards again, starting with what waited.
func (p *Proxy) Resume() {
	p.mu.Lock()
	if p.resume != nil {
		close(p.resume)
		p.resume = nil
	}
	p.mu.Unlock()
}

// ResetAll resets every open connection (RST both ways; bytes in flight
// are lost) and returns how many there were.
func (p *Proxy) ResetAll() int {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.reset()
	}
	p.resets.Add(int64(len(ls)))
	return len(ls)
}

// ResetAfter arms the proxy: from now on, a connection is reset right after
// it forwarded a client chunk containing pattern. nil disarms.
func (p *Proxy) ResetAfter(pattern []byte) {
	p.mu.Lock()
	p.resetOn = pattern
	p.mu.Unlock()
}

// Close stops accepting, resets every connection and waits for the
// forwarders.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Resume()
	p.ResetAll()
	p.wg.Wait()
}
