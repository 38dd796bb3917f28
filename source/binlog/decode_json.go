package binlog

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// MySQL's binary JSON (the JSON column type; MariaDB logs JSON as text)
// value types.
const (
	jsonSmallObject = 0x00
	jsonLargeObject = 0x01
	jsonSmallArray  = 0x02
	jsonLargeArray  = 0x03
	jsonLiteral     = 0x04
	jsonInt16       = 0x05
	jsonUint16      = 0x06
	jsonInt32       = 0x07
	jsonUint32      = 0x08
	jsonInt64       = 0x09
	jsonUint64      = 0x0a
	jsonDouble      = 0x0b
	jsonString      = 0x0c
	jsonOpaque      = 0x0f
)

var errJSONShort = errors.New("binary JSON ends early")

// jsonText converts a MySQL binary JSON document to its JSON text.
func jsonText(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return []byte("null"), nil
	}
	out, err := appendJSON(nil, b[0], b[1:], 0)
	if err != nil {
		return nil, fmt.Errorf("binary JSON: %w", err)
	}
	return out, nil
}

// appendJSON appends the value of type t stored in doc (for containers,
// doc starts at the container) to out.
func appendJSON(out []byte, t byte, doc []byte, depth int) ([]byte, error) {
	if depth > 100 {
		return nil, errors.New("nested deeper than 100 levels")
	}
	switch t {
	case jsonSmallObject, jsonLargeObject, jsonSmallArray, jsonLargeArray:
		return appendContainer(out, t, doc, depth)
	case jsonLiteral:
		if len(doc) < 1 {
			return nil, errJSONShort
		}
		switch doc[0] {
		case 0:
			return append(out, "null"...), nil
		case 1:
			return append(out, "true"...), nil
		case 2:
			return append(out, "false"...), nil
		}
		return nil, fmt.Errorf("literal %d", doc[0])
	case jsonInt16, jsonUint16:
		if len(doc) < 2 {
			return nil, errJSONShort
		}
		v := binary.LittleEndian.Uint16(doc)
		if t == jsonInt16 {
			return strconv.AppendInt(out, int64(int16(v)), 10), nil
		}
		return strconv.AppendUint(out, uint64(v), 10), nil
	case jsonInt32, jsonUint32:
		if len(doc) < 4 {
			return nil, errJSONShort
		}
		v := binary.LittleEndian.Uint32(doc)
		if t == jsonInt32 {
			return strconv.AppendInt(out, int64(int32(v)), 10), nil
		}
		return strconv.AppendUint(out, uint64(v), 10), nil
	case jsonInt64, jsonUint64, jsonDouble:
		if len(doc) < 8 {
			return nil, errJSONShort
		}
		v := binary.LittleEndian.Uint64(doc)
		switch t {
		case jsonInt64:
			return strconv.AppendInt(out, int64(v), 10), nil
		case jsonUint64:
			return strconv.AppendUint(out, v, 10), nil
		}
		f := math.Float64frombits(v)
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, errors.New("a double that JSON cannot hold")
		}
		return strconv.AppendFloat(out, f, 'g', -1, 64), nil
	case jsonString:
		s, err := jsonVarString(doc)
		if err != nil {
			return nil, err
		}
		q, _ := json.Marshal(string(s))
		return append(out, q...), nil
	case jsonOpaque:
		if len(doc) < 1 {
			return nil, errJSONShort
		}
		s, err := jsonVarString(doc[1:])
		if err != nil {
			return nil, err
		}
		q, _ := json.Marshal(string(s)) // a DATE, DECIMAL, … as its stored bytes
		return append(out, q...), nil
	}
	return nil, fmt.Errorf("value type %#x", t)
}

// jsonVarString reads a length (7 bits a byte, low first) and that many
// bytes.
func jsonVarString(doc []byte) ([]byte, error) {
	var n uint64
	for i := 0; i < 5; i++ {
		if i >= len(doc) {
			return nil, errJSONShort
		}
		n |= uint64(doc[i]&0x7f) << (7 * i)
		if doc[i]&0x80 == 0 {
			doc = doc[i+1:]
			if n > uint64(len(doc)) {
				return nil, errJSONShort
			}
			return doc[:n], nil
		}
	}
	return nil, errors.New("a string length of more than 5 bytes")
}

// appendContainer appends an object or array: element count and byte
// size (2 bytes each when small, 4 when large), key entries (offset, 2-byte
// length) for objects, value entries (type, then an offset or the value
// itself when it fits), all offsets from the container's start.
func appendContainer(out []byte, t byte, doc []byte, depth int) ([]byte, error) {
	large := t == jsonLargeObject || t == jsonLargeArray
	object := t == jsonSmallObject || t == jsonLargeObject
	w := 2
	if large {
		w = 4
	}
	word := func(at int) (int, error) {
		if at < 0 || at+w > len(doc) {
			return 0, errJSONShort
		}
		if large {
			v := binary.LittleEndian.Uint32(doc[at:])
			if v > math.MaxInt32 {
				return 0, errJSONShort
			}
			return int(v), nil
		}
		return int(binary.LittleEndian.Uint16(doc[at:])), nil
	}
	count, err := word(0)
	if err != nil {
		return nil, err
	}
	size, err := word(w)
	if err != nil {
		return nil, err
	}
	if size > len(doc) || count > size {
		return nil, errJSONShort
	}
	doc = doc[:size]
	keyEntries := 2 * w
	valueEntries := keyEntries
	if object {
		valueEntries += count * (w + 2)
	}
	if valueEntries+count*(1+w) > size {
		return nil, errJSONShort
	}
	open, closing := byte('['), byte(']')
	if object {
		open, closing = '{', '}'
	}
	out = append(out, open)
	for i := range count {
		if i > 0 {
			out = append(out, ',')
		}
		if object {
			at := keyEntries + i*(w+2)
			off, err := word(at)
			if err != nil {
				return nil, err
			}
			kl := int(binary.LittleEndian.Uint16(doc[at+w:]))
			if off+kl > size {
				return nil, errJSONShort
			}
			q, _ := json.Marshal(string(doc[off : off+kl]))
			out = append(append(out, q...), ':')
		}
		at := valueEntries + i*(1+w)
		vt := doc[at]
		inline := vt == jsonLiteral || vt == jsonInt16 || vt == jsonUint16 || large && (vt == jsonInt32 || vt == jsonUint32)
		if inline {
			out, err = appendJSON(out, vt, doc[at+1:at+1+w], depth+1)
		} else {
			off, werr := word(at + 1)
			if werr != nil {
				return nil, werr
			}
			if off >= size {
				return nil, errJSONShort
			}
			out, err = appendJSON(out, vt, doc[off:], depth+1)
		}
		if err != nil {
			return nil, err
		}
	}
	return append(out, closing), nil
}
