package binlog

import (
	"fmt"
)

// Column types of a table map (enum_field_types).
const (
	typeDecimal    = 0
	typeTiny       = 1
	typeShort      = 2
	typeLong       = 3
	typeFloat      = 4
	typeDouble     = 5
	typeNull       = 6
	typeTimestamp  = 7
	typeLongLong   = 8
	typeInt24      = 9
	typeDate       = 10
	typeTime       = 11
	typeDatetime   = 12
	typeYear       = 13
	typeVarchar    = 15
	typeBit        = 16
	typeTimestamp2 = 17
	typeDatetime2  = 18
	typeTime2      = 19
	typeJSON       = 245 // MySQL's binary JSON; MariaDB stores JSON as LONGTEXT (a BLOB)
	typeNewDecimal = 246
	typeEnum       = 247
	typeSet        = 248
	typeTinyBlob   = 249
	typeMediumBlob = 250
	typeLongBlob   = 251
	typeBlob       = 252
	typeVarString  = 253
	typeString     = 254
	typeGeometry   = 255
)

// Optional metadata of a table map (binlog_row_metadata=FULL).
const (
	metaSignedness = 1
	metaColumnName = 4
)

// tableMapEvent maps a table id to a table and its column types.
type tableMapEvent struct {
	ID     uint64
	Schema string
	Table  string
	Types  []byte
	Meta   []uint16
	Names  []string // nil unless the server logs column names (binlog_row_metadata=FULL)
}

// rowsEv is a rows event's head: the table and the row images, not yet
// decoded (only the outbox table's are).
type rowsEv struct {
	Kind    byte // 'w', 'u' or 'd'
	TableID uint64
	StmtEnd bool
	Columns int
	Present []byte // columns in the (before) image
	After   []byte // columns in the after image (updates)
	Data    []byte // the row images
}

func (d *decoder) parseTableMap(h header, body []byte) (*tableMapEvent, error) {
	r := reader{b: body}
	tm := &tableMapEvent{}
	if d.postHead(evTableMap, 8) == 6 {
		tm.ID = uint64(r.u32())
	} else {
		tm.ID = r.u48()
	}
	r.skip(2) // flags
	n := int(r.u8())
	tm.Schema = string(r.bytes(n))
	r.skip(1)
	n = int(r.u8())
	tm.Table = string(r.bytes(n))
	r.skip(1)
	cols := r.lenenc()
	if r.err == nil && cols > uint64(len(r.b)) {
		return nil, malformed(h, "table map of %d columns in %d bytes", cols, len(r.b))
	}
	tm.Types = append([]byte{}, r.bytes(int(cols))...)
	meta := reader{b: r.lenencBytes()}
	tm.Meta = make([]uint16, cols)
	for i, t := range tm.Types {
		switch t {
		case typeFloat, typeDouble, typeBlob, typeTinyBlob, typeMediumBlob, typeLongBlob, typeGeometry, typeJSON,
			typeTimestamp2, typeDatetime2, typeTime2:
			tm.Meta[i] = uint16(meta.u8())
		case typeVarchar, typeVarString, typeBit:
			tm.Meta[i] = meta.u16()
		case typeNewDecimal, typeString, typeEnum, typeSet:
			// big-endian: (precision, scale) or (real type, length)
			hi, lo := meta.u8(), meta.u8()
			tm.Meta[i] = uint16(hi)<<8 | uint16(lo)
		}
	}
	if meta.err != nil {
		return nil, malformed(h, "table map %s.%s: the column metadata is short", tm.Schema, tm.Table)
	}
	r.skip((int(cols) + 7) / 8) // nullability
	for r.err == nil && len(r.b) > 0 {
		t := r.u8()
		v := reader{b: r.lenencBytes()}
		if t == metaColumnName {
			for v.err == nil && len(v.b) > 0 {
				tm.Names = append(tm.Names, string(v.lenencBytes()))
			}
			if v.err != nil || len(tm.Names) != int(cols) {
				return nil, malformed(h, "table map %s.%s: %d column names for %d columns", tm.Schema, tm.Table, len(tm.Names), cols)
			}
		}
	}
	if r.err != nil {
		return nil, malformed(h, "table map: %v", r.err)
	}
	return tm, nil
}

func (d *decoder) parseRowsHead(h header, body []byte) (*rowsEv, error) {
	ev := &rowsEv{}
	v2 := false
	compressed := false
	switch h.Type {
	case evWriteRowsV1, evWriteRowsV2, evWriteRowsCompV1, evWriteRowsComp:
		ev.Kind = 'w'
	case evUpdateRowsV1, evUpdateRowsV2, evUpdateRowsCompV1, evUpdateRowsComp:
		ev.Kind = 'u'
	default:
		ev.Kind = 'd'
	}
	switch h.Type {
	case evWriteRowsV2, evUpdateRowsV2, evDeleteRowsV2, evWriteRowsComp, evUpdateRowsComp, evDeleteRowsComp:
		v2 = true
	}
	compressed = h.Type >= evWriteRowsCompV1 && h.Type <= evDeleteRowsComp
	def := 8
	if v2 {
		def = 10
	}
	ph := d.postHead(h.Type, def)
	r := reader{b: body}
	if ph == 6 {
		ev.TableID = uint64(r.u32())
	} else {
		ev.TableID = r.u48()
	}
	flags := r.u16()
	ev.StmtEnd = flags&1 != 0
	if v2 {
		extra := int(r.u16())
		r.skip(extra - 2)
	}
	if r.err != nil {
		return nil, malformed(h, "rows event: %v", r.err)
	}
	cols := r.lenenc()
	if r.err == nil && cols > 1<<16 {
		return nil, malformed(h, "a rows event of %d columns", cols)
	}
	ev.Columns = int(cols)
	ev.Present = r.bytes((ev.Columns + 7) / 8)
	if ev.Kind == 'u' {
		ev.After = r.bytes((ev.Columns + 7) / 8)
	}
	if r.err != nil {
		return nil, malformed(h, "rows event: %v", r.err)
	}
	ev.Data = r.rest()
	if compressed { // MariaDB compresses the row images only
		var err error
		if ev.Data, err = uncompress(ev.Data); err != nil {
			return nil, malformed(h, "compressed rows: %v", err)
		}
	}
	return ev, nil
}

func bit(b []byte, i int) bool { return i/8 < len(b) && b[i/8]&(1<<(i%8)) != 0 }

// rowImage is one row: a value per column of the table map, nil for NULL
// or a column not in the image.
type rowImage []any

// decodeRows reads the row images of ev by tm's column types. Updates give
// the before and after image of each row in turn.
func decodeRows(tm *tableMapEvent, ev *rowsEv) ([]rowImage, error) {
	if ev.Columns != len(tm.Types) {
		return nil, fmt.Errorf("binlog: a rows event of %s.%s has %d columns, its table map %d", tm.Schema, tm.Table, ev.Columns, len(tm.Types))
	}
	r := reader{b: ev.Data}
	var out []rowImage
	images := []([]byte){ev.Present}
	if ev.Kind == 'u' {
		images = append(images, ev.After)
	}
	for len(r.b) > 0 && r.err == nil {
		left := len(r.b)
		for _, present := range images {
			n := 0
			for i := range ev.Columns {
				if bit(present, i) {
					n++
				}
			}
			nulls := r.bytes((n + 7) / 8)
			row := make(rowImage, ev.Columns)
			k := 0
			for i := range ev.Columns {
				if !bit(present, i) {
					continue
				}
				isNull := bit(nulls, k)
				k++
				if isNull {
					continue
				}
				v, err := readValue(&r, tm.Types[i], tm.Meta[i])
				if err != nil {
					return nil, fmt.Errorf("binlog: a row of %s.%s, column %d: %w", tm.Schema, tm.Table, i+1, err)
				}
				row[i] = v
			}
			if r.err != nil {
				return nil, fmt.Errorf("binlog: a row image of %s.%s is cut short", tm.Schema, tm.Table)
			}
			out = append(out, row)
		}
		if len(r.b) == left {
			return nil, fmt.Errorf("binlog: a rows event of %s.%s holds %d bytes that are no row", tm.Schema, tm.Table, left)
		}
	}
	return out, nil
}
