package binlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Commands of the replication protocol.
const (
	comRegisterSlave = 0x15
	comBinlogDump    = 0x12
)

// errLogLost is the server refusing to stream from a position (error 1236,
// ER_MASTER_FATAL_ERROR_READING_BINLOG): its file was purged, the GTID is
// not in the binlog, or the GTID history diverged. The log cannot be
// trusted from there: the source falls back to the table.
type errLogLost struct{ err error }

func (e errLogLost) Error() string {
	return "the server cannot stream from the saved position: " + e.err.Error()
}
func (e errLogLost) Unwrap() error { return e.err }

// dumpFrom is where a stream starts: a GTID position (MariaDB), or a file
// and an offset.
type dumpFrom struct {
	GTID string
	File string
	Pos  uint32
}

func (f dumpFrom) String() string {
	if f.GTID != "" {
		return "GTID " + f.GTID
	}
	return fmt.Sprintf("%s:%d", f.File, f.Pos)
}

// startDump asks the server for its binlog from f: the session variables
// of a MariaDB replica (checksums as the server writes them, GTID
// capability and start position, heartbeats), COM_REGISTER_SLAVE, then
// COM_BINLOG_DUMP. Events follow; read them with readEvent.
func (c *conn) startDump(serverID uint32, f dumpFrom, heartbeat time.Duration, nonBlocking bool) error {
	stmts := []string{
		"SET @master_binlog_checksum = @@global.binlog_checksum",
		"SET @mariadb_slave_capability = 4", // MARIA_SLAVE_CAPABILITY_GTID: GTID events, not BEGIN queries
		fmt.Sprintf("SET @master_heartbeat_period = %d", heartbeat.Nanoseconds()),
	}
	if f.GTID != "" {
		stmts = append(stmts,
			"SET @slave_connect_state = '"+strings.ReplaceAll(f.GTID, "'", "")+"'",
			"SET @slave_gtid_strict_mode = 1",
			"SET @slave_gtid_ignore_duplicates = 0")
	}
	for _, s := range stmts {
		if err := c.exec(s); err != nil {
			return fmt.Errorf("binlog: %s: %w", s, err)
		}
	}
	host, _ := os.Hostname()
	host = host[:min(len(host), 60)]
	b := []byte{comRegisterSlave}
	b = binary.LittleEndian.AppendUint32(b, serverID)
	b = append(append(b, byte(len(host))), host...)
	b = append(b, 0, 0) // user, password: not reported
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, 0) // replication rank
	b = binary.LittleEndian.AppendUint32(b, 0) // master id
	if err := c.command(b); err != nil {
		return err
	}
	if err := c.readOK("COM_REGISTER_SLAVE"); err != nil {
		return err
	}
	b = []byte{comBinlogDump}
	pos, file := f.Pos, f.File
	if f.GTID != "" {
		pos, file = 4, ""
	}
	b = binary.LittleEndian.AppendUint32(b, pos)
	var flags uint16 // no annotate-rows events
	if nonBlocking {
		flags |= 1 // BINLOG_DUMP_NON_BLOCK: EOF at the end of the log (captures)
	}
	b = binary.LittleEndian.AppendUint16(b, flags)
	b = binary.LittleEndian.AppendUint32(b, serverID)
	b = append(b, file...)
	return c.command(b)
}

func (c *conn) readOK(what string) error {
	p, err := c.readPacket()
	if err != nil {
		return fmt.Errorf("binlog: %s: %w", what, err)
	}
	if len(p) > 0 && p[0] == 0xff {
		return fmt.Errorf("binlog: %s: %w", what, parseErr(p))
	}
	if len(p) == 0 || p[0] != 0x00 {
		return fmt.Errorf("binlog: %s: unexpected answer %#x", what, p[:min(len(p), 1)])
	}
	return nil
}

// readEvent reads the next event of the dump stream. The slice is valid
// until the next read. io.EOF: the server ended the stream.
func (c *conn) readEvent() ([]byte, error) {
	p, err := c.readPacket()
	if err != nil {
		return nil, err
	}
	switch {
	case len(p) == 0:
		return nil, errors.New("binlog: an empty packet in the binlog stream")
	case p[0] == 0x00:
		return p[1:], nil
	case p[0] == 0xff:
		err := parseErr(p)
		var se *serverError
		if errors.As(err, &se) && se.Code == 1236 {
			return nil, errLogLost{err}
		}
		return nil, fmt.Errorf("binlog: the server ended the stream: %w", err)
	case p[0] == 0xfe && len(p) < 9:
		return nil, io.EOF
	}
	return nil, fmt.Errorf("binlog: unexpected packet %#x in the binlog stream", p[0])
}
