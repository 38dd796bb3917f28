package binlog

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"strings"
)

// Binlog event types (Log_event_type) the source reads or recognises.
const (
	evQuery              = 2
	evStop               = 3
	evRotate             = 4
	evFormatDescription  = 15
	evXID                = 16
	evTableMap           = 19
	evWriteRowsV1        = 23
	evUpdateRowsV1       = 24
	evDeleteRowsV1       = 25
	evIncident           = 26
	evHeartbeat          = 27
	evWriteRowsV2        = 30
	evUpdateRowsV2       = 31
	evDeleteRowsV2       = 32
	evXAPrepare          = 38  // MariaDB 10.5+: the end of an XA transaction's prepared group
	evTransactionPayload = 40  // MySQL 8.0.20+: zstd-compressed transaction
	evAnnotateRows       = 160 // MariaDB
	evBinlogCheckpoint   = 161
	evMariaGTID          = 162
	evMariaGTIDList      = 163
	evStartEncryption    = 164
	evQueryCompressed    = 165
	evWriteRowsCompV1    = 166
	evUpdateRowsCompV1   = 167
	evDeleteRowsCompV1   = 168
	evWriteRowsComp      = 169
	evUpdateRowsComp     = 170
	evDeleteRowsComp     = 171
)

const (
	headerLen         = 19
	flagArtificial    = 0x20 // LOG_EVENT_ARTIFICIAL_F: made up by the server for this stream
	checksumCRC32     = 1
	maxUncompressed   = 1 << 30 // a compressed event announcing more is malformed
	gtidFlStandalone  = 1
	gtidFlGroupCommit = 2
)

// header is the common header of every binlog event (v4).
type header struct {
	Timestamp uint32
	Type      byte
	ServerID  uint32
	Size      uint32
	LogPos    uint32 // the end of the event in its file; 0 in artificial events and MariaDB 11.4+'s
	Flags     uint16
}

// Decoded events. Others are skipped (skipped).
type (
	formatDesc struct {
		Version   string
		Checksum  bool
		PostHeads []byte // post-header length per event type - 1
	}
	rotate struct {
		Pos  uint64
		File string
	}
	query struct {
		Schema string
		Text   string
	}
	xid       struct{ XID uint64 }
	mariaGTID struct {
		Domain, Server uint32
		Seq            uint64
		Standalone     bool // a statement outside a transaction (DDL): no XID follows
	}
	gtidList  struct{ GTIDs []gtid }
	heartbeat struct{ File string }
	xaPrepare struct {
		OnePhase bool
		ID       string // as XA statements print it: X'gtrid',X'bqual',formatID (hex upper-case)
	}
	skipped struct{}
)

// gtid is one MariaDB GTID, domain-server-seq.
type gtid struct {
	Domain, Server uint32
	Seq            uint64
}

func (g gtid) String() string { return fmt.Sprintf("%d-%d-%d", g.Domain, g.Server, g.Seq) }

// event is one decoded event: its header and one of the types above.
type event struct {
	header
	Body any
}

// decoder turns a stream's events into values. It keeps the stream's
// state: the checksum algorithm and the post-header lengths of the last
// format description, and the table maps seen.
type decoder struct {
	checksum  bool
	postHeads []byte
	tables    map[uint64]*tableMapEvent
}

func newDecoder(checksum bool) *decoder {
	return &decoder{checksum: checksum, tables: map[uint64]*tableMapEvent{}}
}

// malformed is a decoding error naming the event.
func malformed(h header, format string, args ...any) error {
	return fmt.Errorf("binlog: malformed event (type %d, %d bytes, end position %d): %s", h.Type, h.Size, h.LogPos, fmt.Sprintf(format, args...))
}

// errZstdPayload: MySQL 8's binlog_transaction_compression.
var errZstdPayload = errors.New("binlog: the server compresses transactions with zstd (MySQL binlog_transaction_compression=ON), which this source does not read: SET GLOBAL binlog_transaction_compression=OFF")

// decode decodes one event (its header, body and checksum, as the dump
// stream carries it after the OK byte). The result does not keep raw.
func (d *decoder) decode(raw []byte) (event, error) {
	var ev event
	if len(raw) < headerLen {
		return ev, fmt.Errorf("binlog: malformed event: %d bytes, shorter than the %d-byte header", len(raw), headerLen)
	}
	r := reader{b: raw}
	ev.header = header{Timestamp: r.u32(), Type: r.u8(), ServerID: r.u32(), Size: r.u32(), LogPos: r.u32(), Flags: r.u16()}
	h := ev.header
	if int64(h.Size) != int64(len(raw)) {
		return ev, malformed(h, "the header says %d bytes", h.Size)
	}
	if h.Type == evFormatDescription {
		fd, err := parseFormatDesc(h, raw[headerLen:])
		if err != nil {
			return ev, err
		}
		d.checksum, d.postHeads = fd.Checksum, fd.PostHeads
		ev.Body = fd
		return ev, nil
	}
	body := raw[headerLen:]
	if d.checksum {
		if len(body) < 4 {
			return ev, malformed(h, "too short for its CRC32 checksum")
		}
		want := binary.LittleEndian.Uint32(raw[len(raw)-4:])
		if got := crc32.ChecksumIEEE(raw[:len(raw)-4]); got != want {
			// the server makes up some events for a stream (the rotate
			// at connect, heartbeats) and may leave their checksum out
			lenient := h.Type == evHeartbeat || h.Type == evRotate && (h.Flags&flagArtificial != 0 || h.LogPos == 0)
			if !lenient {
				return ev, malformed(h, "CRC32 checksum %08x, computed %08x: the event is corrupt", want, got)
			}
		} else {
			body = body[:len(body)-4]
		}
	}
	var err error
	switch h.Type {
	case evRotate:
		ev.Body, err = parseRotate(h, body)
	case evQuery, evQueryCompressed:
		ev.Body, err = d.parseQuery(h, body)
	case evXID:
		r := reader{b: body}
		ev.Body = xid{XID: r.u64()}
		err = r.err
	case evMariaGTID:
		ev.Body, err = parseMariaGTID(h, body)
	case evMariaGTIDList:
		ev.Body, err = parseGTIDList(h, body)
	case evHeartbeat:
		ev.Body = heartbeat{File: string(body)}
	case evXAPrepare:
		ev.Body, err = parseXAPrepare(h, body)
	case evTableMap:
		var tm *tableMapEvent
		tm, err = d.parseTableMap(h, body)
		if err == nil {
			d.tables[tm.ID] = tm
			ev.Body = tm
		}
	case evWriteRowsV1, evUpdateRowsV1, evDeleteRowsV1, evWriteRowsV2, evUpdateRowsV2, evDeleteRowsV2,
		evWriteRowsCompV1, evUpdateRowsCompV1, evDeleteRowsCompV1, evWriteRowsComp, evUpdateRowsComp, evDeleteRowsComp:
		ev.Body, err = d.parseRowsHead(h, body)
	case evTransactionPayload:
		err = errZstdPayload
	case evIncident:
		err = fmt.Errorf("binlog: the server logged an incident (event at end position %d): its binlog may miss changes; the source falls back to the table", h.LogPos)
	default:
		ev.Body = skipped{}
	}
	if err != nil {
		if r.err != nil || errors.Is(err, errShort) {
			return ev, malformed(h, "%v", err)
		}
		return ev, err
	}
	return ev, nil
}

// parseFormatDesc reads a FORMAT_DESCRIPTION_EVENT body (with its
// checksum algorithm and checksum, since MySQL 5.6.1 and MariaDB 5.3).
func parseFormatDesc(h header, body []byte) (*formatDesc, error) {
	r := reader{b: body}
	if v := r.u16(); r.err == nil && v != 4 {
		return nil, malformed(h, "binlog version %d; only version 4 is supported", v)
	}
	version := string(bytes.TrimRight(r.bytes(50), "\x00"))
	r.skip(4)
	if hl := r.u8(); r.err == nil && hl != headerLen {
		return nil, malformed(h, "common header of %d bytes; only %d is supported", hl, headerLen)
	}
	if r.err != nil {
		return nil, malformed(h, "%v", r.err)
	}
	fd := &formatDesc{Version: version}
	rest := r.rest()
	if hasChecksumAlg(version) {
		if len(rest) < 5 {
			return nil, malformed(h, "too short for its checksum algorithm")
		}
		alg := rest[len(rest)-5]
		fd.Checksum = alg == checksumCRC32
		if alg != 0 && alg != checksumCRC32 {
			return nil, malformed(h, "checksum algorithm %d; only CRC32 (1) and none (0) exist", alg)
		}
		if fd.Checksum {
			want := binary.LittleEndian.Uint32(rest[len(rest)-4:])
			if got := crc32.Update(crc32.Update(0, crc32.IEEETable, headBytes(h)), crc32.IEEETable, body[:len(body)-4]); got != want {
				return nil, malformed(h, "CRC32 checksum %08x, computed %08x: the event is corrupt", want, got)
			}
		}
		rest = rest[:len(rest)-5]
	}
	fd.PostHeads = append([]byte{}, rest...)
	return fd, nil
}

// headBytes re-encodes a header (for checksumming the format description,
// which decode has already split).
func headBytes(h header) []byte {
	b := make([]byte, 0, headerLen)
	b = binary.LittleEndian.AppendUint32(b, h.Timestamp)
	b = append(b, h.Type)
	b = binary.LittleEndian.AppendUint32(b, h.ServerID)
	b = binary.LittleEndian.AppendUint32(b, h.Size)
	b = binary.LittleEndian.AppendUint32(b, h.LogPos)
	return binary.LittleEndian.AppendUint16(b, h.Flags)
}

// hasChecksumAlg reports whether a server of version writes the checksum
// algorithm into its format description: MySQL 5.6.1+, MariaDB 5.3+ (all
// servers this source supports; older ones are read without).
func hasChecksumAlg(version string) bool {
	nums := strings.SplitN(strings.SplitN(version, "-", 2)[0], ".", 3)
	if len(nums) < 3 {
		return false
	}
	var v [3]int
	for i, n := range nums {
		x, err := strconv.Atoi(strings.TrimFunc(n, func(r rune) bool { return r < '0' || r > '9' }))
		if err != nil {
			return false
		}
		v[i] = x
	}
	at := v[0]*10000 + v[1]*100 + v[2]
	if strings.Contains(version, "MariaDB") {
		return at >= 50300
	}
	return at >= 50601
}

func parseRotate(h header, body []byte) (rotate, error) {
	r := reader{b: body}
	pos := r.u64()
	file := string(r.rest())
	if r.err != nil {
		return rotate{}, malformed(h, "%v", r.err)
	}
	if file == "" {
		return rotate{}, malformed(h, "a rotate event without a file name")
	}
	return rotate{Pos: pos, File: file}, nil
}

// postHead is the post-header length of event type t by the last format
// description, or def when there was none.
func (d *decoder) postHead(t byte, def int) int {
	if int(t) >= 1 && int(t) <= len(d.postHeads) {
		return int(d.postHeads[t-1])
	}
	return def
}

func (d *decoder) parseQuery(h header, body []byte) (query, error) {
	r := reader{b: body}
	ph := d.postHead(h.Type, 13)
	post := reader{b: r.bytes(ph)}
	post.skip(8) // thread id, execution time
	schemaLen := int(post.u8())
	post.skip(2) // error code
	statusLen := 0
	if ph >= 13 {
		statusLen = int(post.u16())
	}
	r.skip(statusLen)
	schema := string(r.bytes(schemaLen))
	r.skip(1)
	if r.err != nil || post.err != nil {
		return query{}, malformed(h, "query event: %v", errors.Join(r.err, post.err))
	}
	text := r.rest()
	if h.Type == evQueryCompressed {
		var err error
		if text, err = uncompress(text); err != nil {
			return query{}, malformed(h, "compressed query: %v", err)
		}
	}
	return query{Schema: schema, Text: string(text)}, nil
}

func parseMariaGTID(h header, body []byte) (mariaGTID, error) {
	r := reader{b: body}
	g := mariaGTID{Seq: r.u64(), Domain: r.u32(), Server: h.ServerID}
	flags := r.u8()
	if r.err != nil {
		return g, malformed(h, "GTID event: %v", r.err)
	}
	g.Standalone = flags&gtidFlStandalone != 0
	return g, nil
}

func parseGTIDList(h header, body []byte) (gtidList, error) {
	r := reader{b: body}
	n := r.u32() & 0x0fffffff // the top 4 bits are flags
	if r.err == nil && uint64(n)*16 > uint64(len(r.b)) {
		return gtidList{}, malformed(h, "GTID list of %d entries in %d bytes", n, len(r.b))
	}
	l := gtidList{GTIDs: make([]gtid, 0, n)}
	for range n {
		l.GTIDs = append(l.GTIDs, gtid{Domain: r.u32(), Server: r.u32(), Seq: r.u64()})
	}
	if r.err != nil {
		return gtidList{}, malformed(h, "GTID list: %v", r.err)
	}
	return l, nil
}

// uncompress reads MariaDB's compressed event data: one byte 0x80|n, n
// bytes of the uncompressed length (big-endian), then a zlib stream.
func uncompress(b []byte) ([]byte, error) {
	if len(b) < 1 || b[0]&0x80 == 0 {
		return nil, errors.New("the compression header byte is missing")
	}
	n := int(b[0] & 0x07)
	if n < 1 || n > 4 || len(b) < 1+n {
		return nil, fmt.Errorf("the compression header announces a %d-byte length", n)
	}
	var size uint64
	for _, c := range b[1 : 1+n] {
		size = size<<8 | uint64(c)
	}
	if size > maxUncompressed {
		return nil, fmt.Errorf("the compressed data claims %d bytes", size)
	}
	zr, err := zlib.NewReader(bytes.NewReader(b[1+n:]))
	if err != nil {
		return nil, err
	}
	buf := bytes.NewBuffer(make([]byte, 0, min(size, 1<<20)))
	if _, err := io.Copy(buf, io.LimitReader(zr, int64(size)+1)); err != nil {
		return nil, err
	}
	if uint64(buf.Len()) != size {
		return nil, fmt.Errorf("the compressed data holds %d bytes, its header says %d", buf.Len(), size)
	}
	return buf.Bytes(), nil
}

func parseXAPrepare(h header, body []byte) (xaPrepare, error) {
	r := reader{b: body}
	one := r.u8() != 0
	format := r.u32()
	gl, bl := r.u32(), r.u32()
	if r.err == nil && uint64(gl)+uint64(bl) > uint64(len(r.b)) {
		return xaPrepare{}, malformed(h, "XA prepare: an xid of %d+%d bytes in %d", gl, bl, len(r.b))
	}
	g := r.bytes(int(gl))
	b := r.bytes(int(bl))
	if r.err != nil {
		return xaPrepare{}, malformed(h, "XA prepare: %v", r.err)
	}
	return xaPrepare{OnePhase: one, ID: fmt.Sprintf("X'%X',X'%X',%d", g, b, format)}, nil
}
