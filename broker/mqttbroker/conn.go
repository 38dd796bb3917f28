package mqttbroker

import (
	"bufio"
	"net"
	"sync"
	"syscall"
	"time"
)

// quickAckConn is the connection paho reads from and writes to. Writes get
// a deadline of Config.Timeout each: paho writes a PUBLISH straight to the
// socket, with no deadline, so a server or network that stopped taking
// bytes would hold Publish, and the relay's claim, past any context
// deadline; a write that cannot finish fails and ends the connection
// instead (see Write). Reads are buffered, because paho
// reads a packet's fixed header a byte at a time (a system call each), and
// acknowledging at once what it read (TCP_QUICKACK on Linux).
//
// The second matters with Mosquitto's default set_tcp_nodelay false: the
// server holds a PUBACK back (Nagle) until the previous one's TCP ACK
// arrives, and the relay's kernel, which has nothing to send in return,
// delays that ACK by up to 40ms. Measured here (Mosquitto 2.0.11 on
// loopback, a loaded machine): a Publish of two events took 42ms and one
// of 30 events 47ms without it, 2.3ms and 2.9ms with it. The server's
// operator can also set set_tcp_nodelay true.
//
// It is a sync.Locker, which paho's packet writer takes around the several
// Writes of one packet: a wrapped connection is not a *net.TCPConn, so
// net.Buffers writes a packet piece by piece, and without the lock a
// PINGREQ from paho's pinger (or another goroutine's PUBLISH) could land in
// the middle of a PUBLISH. Found by the benchmark, whose raw path publishes
// from many goroutines on this wrapper.
type quickAckConn struct {
	net.Conn
	sync.Mutex   // paho's packet writer locks it (see above)
	r            *bufio.Reader
	writeTimeout time.Duration
}

// newQuickAckConn wraps c, whose TCP connection is tcp (the same for plain
// TCP; the one under TLS otherwise).
func newQuickAckConn(c net.Conn, tcp net.Conn, writeTimeout time.Duration) net.Conn {
	var rc syscall.RawConn
	if sc, ok := tcp.(syscall.Conn); ok {
		rc, _ = sc.SyscallConn()
	}
	return &quickAckConn{Conn: c, r: bufio.NewReaderSize(&ackingReader{c: c, rc: rc}, 16<<10), writeTimeout: writeTimeout}
}

func (q *quickAckConn) Read(p []byte) (int, error) { return q.r.Read(p) }

// Write writes p by the deadline. A failed write closes the connection:
// part of a packet may have gone out, and whatever came next would be read
// by the server as the rest of it (paho itself keeps the connection after a
// failed PUBLISH write). paho's reader then fails, the client shuts down,
// the events awaiting PUBACKs fail as unavailable, and the Broker
// reconnects.
func (q *quickAckConn) Write(p []byte) (int, error) {
	_ = q.Conn.SetWriteDeadline(time.Now().Add(q.writeTimeout))
	n, err := q.Conn.Write(p)
	if err != nil {
		_ = q.Conn.Close()
	}
	return n, err
}

// ackingReader reads from c and then asks the kernel to acknowledge what
// arrived now rather than later.
type ackingReader struct {
	c  net.Conn
	rc syscall.RawConn
}

func (a *ackingReader) Read(p []byte) (int, error) {
	n, err := a.c.Read(p)
	if n > 0 && a.rc != nil {
		quickAck(a.rc)
	}
	return n, err
}

var _ sync.Locker = (*quickAckConn)(nil) // paho serializes a packet's writes only for a Locker
