package binlog

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1" //nolint:gosec // mysql_native_password is defined over SHA-1
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// conn is one client connection speaking the MySQL protocol, just enough
// of it for replication: the handshake with mysql_native_password (the
// plugin MariaDB's accounts use by default), COM_QUERY for statements
// answered by OK, and the commands of dump.go. Normal queries go through
// database/sql and go-sql-driver/mysql; that driver exposes no raw
// packets, which a binlog stream needs.
type conn struct {
	nc  net.Conn
	r   *bufio.Reader
	seq byte
	id  uint32 // the server's connection id (for KILL)
	buf []byte // reassembly of packets split at 16 MiB
}

// Capability flags of the protocol (Protocol::CapabilityFlags).
const (
	capLongPassword     = 0x00000001
	capLongFlag         = 0x00000004
	capConnectWithDB    = 0x00000008
	capProtocol41       = 0x00000200
	capTransactions     = 0x00002000
	capSecureConnection = 0x00008000
	capMultiResults     = 0x00020000
	capPluginAuth       = 0x00080000
	capPluginAuthLenenc = 0x00200000
)

const maxPacket = 1<<24 - 1

// serverError is an ERR packet.
type serverError struct {
	Code    uint16
	State   string
	Message string
}

func (e *serverError) Error() string {
	return fmt.Sprintf("server error %d (%s): %s", e.Code, e.State, e.Message)
}

// parseErr reads an ERR packet (its first byte 0xff).
func parseErr(p []byte) error {
	if len(p) < 3 {
		return errors.New("binlog: the server sent a truncated error packet")
	}
	e := &serverError{Code: binary.LittleEndian.Uint16(p[1:3])}
	rest := p[3:]
	if len(rest) >= 6 && rest[0] == '#' {
		e.State, rest = string(rest[1:6]), rest[6:]
	}
	e.Message = string(rest)
	return e
}

// dialConfig is what a replication connection needs of the DSN.
type dialConfig struct {
	Net, Addr, User, Passwd, DBName string
	Timeout                         time.Duration
}

// dial connects and authenticates.
func dial(ctx context.Context, dc dialConfig) (*conn, error) {
	d := net.Dialer{Timeout: dc.Timeout}
	network := dc.Net
	if network == "" {
		network = "tcp"
	}
	nc, err := d.DialContext(ctx, network, dc.Addr)
	if err != nil {
		return nil, fmt.Errorf("binlog: connecting to %s: %w", dc.Addr, err)
	}
	c := &conn{nc: nc, r: bufio.NewReaderSize(nc, 64<<10)}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	if err := c.handshake(dc); err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

func (c *conn) Close() error { return c.nc.Close() }

// readPacket reads one logical packet (reassembling 16 MiB pieces). The
// slice is valid until the next read.
func (c *conn) readPacket() ([]byte, error) {
	c.buf = c.buf[:0]
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
			return nil, err
		}
		n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
		c.seq = hdr[3] + 1
		start := len(c.buf)
		if cap(c.buf)-start < n {
			nb := make([]byte, start, start+n)
			copy(nb, c.buf)
			c.buf = nb
		}
		c.buf = c.buf[:start+n]
		if _, err := io.ReadFull(c.r, c.buf[start:]); err != nil {
			return nil, err
		}
		if n < maxPacket {
			return c.buf, nil
		}
	}
}

// writePacket sends payload as one logical packet.
func (c *conn) writePacket(payload []byte) error {
	for {
		n := min(len(payload), maxPacket)
		hdr := []byte{byte(n), byte(n >> 8), byte(n >> 16), c.seq}
		c.seq++
		if _, err := c.nc.Write(append(hdr, payload[:n]...)); err != nil {
			return err
		}
		payload = payload[n:]
		if n < maxPacket {
			return nil
		}
	}
}

// command starts a new command (sequence 0) with payload.
func (c *conn) command(payload []byte) error {
	c.seq = 0
	return c.writePacket(payload)
}

// handshake reads the server's greeting (HandshakeV10) and answers it
// (HandshakeResponse41), following an auth switch to
// mysql_native_password.
func (c *conn) handshake(dc dialConfig) error {
	p, err := c.readPacket()
	if err != nil {
		return fmt.Errorf("binlog: reading the server's greeting: %w", err)
	}
	if len(p) > 0 && p[0] == 0xff {
		return fmt.Errorf("binlog: the server refused the connection: %w", parseErr(p))
	}
	r := reader{b: p}
	if v := r.u8(); v != 10 {
		return fmt.Errorf("binlog: the server speaks protocol version %d; only 10 is supported", v)
	}
	r.cstring() // server version
	c.id = r.u32()
	scramble := append([]byte{}, r.bytes(8)...)
	r.skip(1)
	caps := uint32(r.u16())
	r.skip(1 + 2) // charset, status
	caps |= uint32(r.u16()) << 16
	authLen := int(r.u8())
	r.skip(10)
	plugin := "mysql_native_password"
	if caps&capSecureConnection != 0 {
		n := max(13, authLen-8)
		part := r.bytes(n)
		scramble = append(scramble, bytes.TrimRight(part, "\x00")...)
	}
	if caps&capPluginAuth != 0 && r.err == nil && len(r.b) > 0 {
		plugin = r.cstring()
	}
	if r.err != nil {
		return fmt.Errorf("binlog: the server's greeting is malformed: %w", r.err)
	}
	if caps&capProtocol41 == 0 {
		return errors.New("binlog: the server does not speak protocol 4.1; use MariaDB 10.5+ or MySQL 8")
	}
	want := uint32(capLongPassword | capLongFlag | capProtocol41 | capTransactions | capSecureConnection | capMultiResults | capPluginAuth | capPluginAuthLenenc)
	if dc.DBName != "" {
		want |= capConnectWithDB
	}
	use := want & caps
	auth := scrambleNative(scramble, dc.Passwd)
	if plugin != "mysql_native_password" {
		// answer with the native scramble anyway; the server then asks
		// for the plugin it wants (auth switch), or refuses
		plugin = "mysql_native_password"
	}
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, use)
	b = binary.LittleEndian.AppendUint32(b, maxPacket)
	b = append(b, 45) // utf8mb4_general_ci
	b = append(b, make([]byte, 23)...)
	b = append(append(b, dc.User...), 0)
	if use&capPluginAuthLenenc != 0 {
		b = appendLenenc(b, uint64(len(auth)))
	} else {
		b = append(b, byte(len(auth)))
	}
	b = append(b, auth...)
	if use&capConnectWithDB != 0 {
		b = append(append(b, dc.DBName...), 0)
	}
	if use&capPluginAuth != 0 {
		b = append(append(b, plugin...), 0)
	}
	if err := c.writePacket(b); err != nil {
		return fmt.Errorf("binlog: sending the handshake response: %w", err)
	}
	for range 3 {
		p, err := c.readPacket()
		if err != nil {
			return fmt.Errorf("binlog: reading the authentication result: %w", err)
		}
		switch {
		case len(p) == 0:
			return errors.New("binlog: the server sent an empty authentication result")
		case p[0] == 0x00:
			return nil
		case p[0] == 0xff:
			return fmt.Errorf("binlog: authenticating as %q: %w", dc.User, parseErr(p))
		case p[0] == 0xfe: // auth switch request
			r := reader{b: p[1:]}
			name := r.cstring()
			data := bytes.TrimRight(r.rest(), "\x00")
			if name != "mysql_native_password" {
				return fmt.Errorf("binlog: the account %q authenticates with %s; the replication client supports mysql_native_password only: ALTER USER %s IDENTIFIED VIA mysql_native_password USING PASSWORD('…')", dc.User, name, dc.User)
			}
			if err := c.writePacket(scrambleNative(data, dc.Passwd)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("binlog: unexpected authentication packet %#x", p[0])
		}
	}
	return errors.New("binlog: authentication did not finish")
}

// scrambleNative is mysql_native_password's answer:
// SHA1(password) XOR SHA1(scramble || SHA1(SHA1(password))).
func scrambleNative(scramble []byte, password string) []byte {
	if password == "" {
		return nil
	}
	h1 := sha1.Sum([]byte(password)) //nolint:gosec // the protocol's hash
	h2 := sha1.Sum(h1[:])            //nolint:gosec // the protocol's hash
	h := sha1.New()                  //nolint:gosec // the protocol's hash
	h.Write(scramble[:min(len(scramble), 20)])
	h.Write(h2[:])
	out := h.Sum(nil)
	for i := range out {
		out[i] ^= h1[i]
	}
	return out
}

// exec runs a statement that answers OK (a SET), skipping a result set if
// one comes.
func (c *conn) exec(query string) error {
	if err := c.command(append([]byte{0x03}, query...)); err != nil {
		return err
	}
	p, err := c.readPacket()
	if err != nil {
		return err
	}
	switch {
	case len(p) > 0 && p[0] == 0x00:
		return nil
	case len(p) > 0 && p[0] == 0xff:
		return parseErr(p)
	}
	// a result set: column definitions up to EOF, rows up to EOF
	for eofs := 0; eofs < 2; {
		p, err := c.readPacket()
		if err != nil {
			return err
		}
		if len(p) > 0 && p[0] == 0xff {
			return parseErr(p)
		}
		if len(p) > 0 && p[0] == 0xfe && len(p) < 9 {
			eofs++
		}
	}
	return nil
}

func appendLenenc(b []byte, v uint64) []byte {
	switch {
	case v < 251:
		return append(b, byte(v))
	case v < 1<<16:
		return append(b, 0xfc, byte(v), byte(v>>8))
	case v < 1<<24:
		return append(b, 0xfd, byte(v), byte(v>>8), byte(v>>16))
	default:
		return binary.LittleEndian.AppendUint64(append(b, 0xfe), v)
	}
}
