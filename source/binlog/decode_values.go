package binlog

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// readValue reads one column value of type t with metadata meta. Integers
// are int64 (the outbox table's are signed), strings and blobs []byte
// (aliasing the event), JSON its text, TIMESTAMP a UTC time.Time with its
// fraction, DATETIME a time.Time in UTC as written. Types the outbox table
// does not use are read past (their size) and returned raw.
func readValue(r *reader, t byte, meta uint16) (any, error) {
	switch t {
	case typeTiny:
		return int64(int8(r.u8())), r.err
	case typeShort:
		return int64(int16(r.u16())), r.err
	case typeInt24:
		v := r.u24()
		if v&0x800000 != 0 {
			v |= 0xff000000
		}
		return int64(int32(v)), r.err
	case typeLong:
		return int64(int32(r.u32())), r.err
	case typeLongLong:
		return int64(r.u64()), r.err
	case typeFloat:
		return float64(math.Float32frombits(r.u32())), r.err
	case typeDouble:
		return math.Float64frombits(r.u64()), r.err
	case typeYear:
		return int64(r.u8()) + 1900, r.err
	case typeNull:
		return nil, nil
	case typeDate, typeTime:
		return r.bytes(3), r.err
	case typeTimestamp:
		return time.Unix(int64(r.u32()), 0).UTC(), r.err
	case typeDatetime:
		v := r.u64()
		return time.Date(int(v/1e10), time.Month(v/1e8%100), int(v/1e6%100), int(v/1e4%100), int(v/100%100), int(v%100), 0, time.UTC), r.err
	case typeTimestamp2:
		b := r.bytes(4)
		if b == nil {
			return nil, r.err
		}
		sec := binary.BigEndian.Uint32(b)
		us, err := fraction(r, meta)
		return time.Unix(int64(sec), us*1000).UTC(), err
	case typeDatetime2:
		return readDatetime2(r, meta)
	case typeTime2:
		b := r.bytes(3 + (int(meta)+1)/2)
		return b, r.err
	case typeVarchar, typeVarString:
		n := 1
		if meta >= 256 {
			n = 2
		}
		return r.bytes(int(r.uint(n))), r.err
	case typeString:
		return readString(r, meta)
	case typeEnum, typeSet:
		return r.bytes(int(meta & 0xff)), r.err
	case typeBlob, typeTinyBlob, typeMediumBlob, typeLongBlob, typeGeometry:
		if meta < 1 || meta > 4 {
			return nil, fmt.Errorf("a BLOB with %d length bytes", meta)
		}
		return r.bytes(int(r.uint(int(meta)))), r.err
	case typeJSON:
		if meta < 1 || meta > 4 {
			return nil, fmt.Errorf("a JSON value with %d length bytes", meta)
		}
		b := r.bytes(int(r.uint(int(meta))))
		if r.err != nil {
			return nil, r.err
		}
		return jsonText(b)
	case typeNewDecimal:
		return r.bytes(decimalSize(int(meta>>8), int(meta&0xff))), r.err
	case typeBit:
		bits, bytes := int(meta&0xff), int(meta>>8)
		n := bytes
		if bits > 0 {
			n++
		}
		return r.bytes(n), r.err
	}
	return nil, fmt.Errorf("column type %d, which this source cannot read", t)
}

// fraction reads the fractional seconds of a TIMESTAMP2/DATETIME2/TIME2
// with fsp digits, as microseconds.
func fraction(r *reader, fsp uint16) (int64, error) {
	switch fsp {
	case 0:
		return 0, r.err
	case 1, 2:
		return int64(r.u8()) * 10000, r.err
	case 3, 4:
		b := r.bytes(2)
		if b == nil {
			return 0, r.err
		}
		return int64(binary.BigEndian.Uint16(b)) * 100, nil
	case 5, 6:
		b := r.bytes(3)
		if b == nil {
			return 0, r.err
		}
		return int64(b[0])<<16 | int64(b[1])<<8 | int64(b[2]), nil
	}
	return 0, fmt.Errorf("fractional seconds of %d digits", fsp)
}

// readDatetime2 reads MySQL 5.6's DATETIME: 40 bits big-endian, offset by
// 2^39: sign, year*13+month (17 bits), day (5), hour (5), minute (6),
// second (6); then the fraction.
func readDatetime2(r *reader, fsp uint16) (any, error) {
	b := r.bytes(5)
	if b == nil {
		return nil, r.err
	}
	v := uint64(b[0])<<32 | uint64(binary.BigEndian.Uint32(b[1:]))
	v -= 0x8000000000
	us, err := fraction(r, fsp)
	if err != nil {
		return nil, err
	}
	ym := v >> 22 & (1<<17 - 1)
	return time.Date(int(ym/13), time.Month(ym%13), int(v>>17&31), int(v>>12&31), int(v>>6&63), int(v&63), int(us)*1000, time.UTC), nil
}

// readString reads a CHAR (MYSQL_TYPE_STRING), whose metadata packs the
// real type and the maximum byte length (its high bits folded into the
// type byte).
func readString(r *reader, meta uint16) (any, error) {
	b0, b1 := byte(meta>>8), byte(meta)
	real, length := b0, int(b1)
	if b0&0x30 != 0x30 {
		length = int(b1) | int((b0&0x30)^0x30)<<4
		real = b0 | 0x30
	}
	switch real {
	case typeEnum, typeSet:
		return r.bytes(int(b1)), r.err
	}
	n := 1
	if length >= 256 {
		n = 2
	}
	return r.bytes(int(r.uint(n))), r.err
}

// decimalSize is the byte size of a DECIMAL(precision, scale): 4 bytes per
// 9 digits, fewer for the leftover digits, on each side of the point.
func decimalSize(precision, scale int) int {
	dig := [10]int{0, 1, 1, 2, 2, 3, 3, 4, 4, 4}
	intg := max(precision-scale, 0)
	return intg/9*4 + dig[intg%9] + scale/9*4 + dig[scale%9]
}
