package binlog

import (
	"bytes"
	"encoding/binary"
	"errors"
)

// errShort: a packet or event ends before a field it announces.
var errShort = errors.New("it ends before a field it announces")

// reader reads little-endian fields off a byte slice, remembering the
// first error: a truncated input gives zero values and err, never a panic.
type reader struct {
	b   []byte
	err error
}

func (r *reader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || n > len(r.b) {
		r.err = errShort
		r.b = nil
		return false
	}
	return true
}

func (r *reader) bytes(n int) []byte {
	if !r.need(n) {
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) skip(n int) { r.bytes(n) }

func (r *reader) rest() []byte {
	out := r.b
	r.b = nil
	return out
}

func (r *reader) u8() uint8 {
	if !r.need(1) {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) u16() uint16 {
	if !r.need(2) {
		return 0
	}
	v := binary.LittleEndian.Uint16(r.b)
	r.b = r.b[2:]
	return v
}

func (r *reader) u24() uint32 {
	b := r.bytes(3)
	if b == nil {
		return 0
	}
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
}

func (r *reader) u32() uint32 {
	if !r.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *reader) u48() uint64 {
	b := r.bytes(6)
	if b == nil {
		return 0
	}
	return uint64(binary.LittleEndian.Uint32(b)) | uint64(binary.LittleEndian.Uint16(b[4:]))<<32
}

func (r *reader) u64() uint64 {
	if !r.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

// uint reads an n-byte little-endian unsigned integer (n ≤ 8).
func (r *reader) uint(n int) uint64 {
	b := r.bytes(n)
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// lenenc reads a length-encoded integer.
func (r *reader) lenenc() uint64 {
	switch first := r.u8(); first {
	case 0xfc:
		return uint64(r.u16())
	case 0xfd:
		return uint64(r.u24())
	case 0xfe:
		return r.u64()
	case 0xfb, 0xff: // NULL, or not a length
		if r.err == nil {
			r.err = errors.New("a length-encoded integer starts with a reserved byte")
		}
		return 0
	default:
		return uint64(first)
	}
}

// lenencBytes reads a length-encoded string.
func (r *reader) lenencBytes() []byte {
	n := r.lenenc()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.need(len(r.b) + 1)
		return nil
	}
	return r.bytes(int(n))
}

// cstring reads a NUL-terminated string (or the rest, when no NUL).
func (r *reader) cstring() string {
	if r.err != nil {
		return ""
	}
	i := bytes.IndexByte(r.b, 0)
	if i < 0 {
		return string(r.rest())
	}
	s := string(r.b[:i])
	r.b = r.b[i+1:]
	return s
}
