package broker

import (
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	outbox "github.com/outbox-go/outbox"
)

// CloudEvents context attribute names, without a transport prefix. Each
// adapter adds its binding's prefix: "ce-" for NATS and HTTP, "ce_" for
// Kafka, "cloudEvents:" for AMQP.
const (
	AttrID              = "id"              // Event.EventID
	AttrSource          = "source"          // the adapter's configured source; SourceDefault when none
	AttrSpecVersion     = "specversion"     // always SpecVersion
	AttrType            = "type"            // Event.Type; left out when empty
	AttrTime            = "time"            // Event.CreatedAt in RFC 3339 (UTC); left out when zero
	AttrDataContentType = "datacontenttype" // Event.ContentType; outbox.DefaultContentType when empty
	// AttrPartitionKey is the CloudEvents partitioning extension: the
	// event's Key (the aggregate id). Left out when the key is empty.
	AttrPartitionKey = "partitionkey"
	// AttrSchemaVersion is an outbox extension carrying Message.SchemaVersion
	// as a decimal integer. The standard dataschema attribute must be an
	// absolute URI, which a bare version number is not.
	AttrSchemaVersion = "schemaversion"
	// AttrAggregateType is an outbox extension carrying
	// Message.AggregateType. Left out when empty.
	AttrAggregateType = "aggregatetype"
)

// Attribute is one CloudEvents context attribute in its canonical string
// form, before any transport encoding.
type Attribute struct {
	Name  string // an Attr… constant
	Value string
}

// CloudEventAttributes returns e's CloudEvents context attributes in a
// fixed order (id, source, specversion, type, time, datacontenttype,
// partitionkey, schemaversion, aggregatetype), leaving out optional ones
// whose value is empty. An empty source means SourceDefault.
//
// The values are not encoded for any transport: adapters whose binding
// requires it (NATS, HTTP) pass them through PercentEncode.
func CloudEventAttributes(e outbox.Event, source string) []Attribute {
	return AppendCloudEventAttributes(make([]Attribute, 0, 9), &e, source)
}

// AppendCloudEventAttributes appends e's CloudEvents context attributes to
// dst, exactly as CloudEventAttributes returns them, and returns the
// extended slice: adapters reuse dst across a batch instead of allocating a
// slice per event.
func AppendCloudEventAttributes(dst []Attribute, e *outbox.Event, source string) []Attribute {
	if source == "" {
		source = SourceDefault
	}
	contentType := e.ContentType
	if contentType == "" {
		contentType = outbox.DefaultContentType
	}
	dst = append(dst,
		Attribute{AttrID, e.EventID},
		Attribute{AttrSource, source},
		Attribute{AttrSpecVersion, SpecVersion},
	)
	if e.Type != "" {
		dst = append(dst, Attribute{AttrType, e.Type})
	}
	if !e.CreatedAt.IsZero() {
		dst = append(dst, Attribute{AttrTime, e.CreatedAt.UTC().Format(time.RFC3339Nano)})
	}
	dst = append(dst, Attribute{AttrDataContentType, contentType})
	if e.Key != "" {
		dst = append(dst, Attribute{AttrPartitionKey, e.Key})
	}
	if e.SchemaVersion > 0 {
		dst = append(dst, Attribute{AttrSchemaVersion, strconv.Itoa(e.SchemaVersion)})
	}
	if e.AggregateType != "" {
		dst = append(dst, Attribute{AttrAggregateType, e.AggregateType})
	}
	return dst
}

// PercentEncode encodes a CloudEvents attribute value for a header, as the
// HTTP and NATS bindings require: space, double quote, percent and every
// byte outside printable ASCII (U+0021–U+007E) become %XY with upper-case
// hex digits; everything else is kept. Plain identifiers (UUIDs, type
// names without spaces) come out unchanged.
func PercentEncode(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if needsPercent(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsPercent(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0x0f])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func needsPercent(c byte) bool {
	return c <= 0x20 || c >= 0x7f || c == '"' || c == '%'
}

// ErrBadPercentEncoding is returned by PercentDecode for a malformed
// escape or a result that is not valid UTF-8.
var ErrBadPercentEncoding = errors.New("broker: malformed percent-encoded header value")

// PercentDecode reverses PercentEncode the way the HTTP and NATS bindings
// ask a receiver to: a double-quoted value is unquoted first (backslash
// escapes included), then one round of percent-decoding is applied, with
// lower-case hex accepted. A result that is not valid UTF-8 (such as the
// overlong "%C0%A0") is refused with ErrBadPercentEncoding.
func PercentDecode(s string) (string, error) {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		var b strings.Builder
		inner := s[1 : len(s)-1]
		for i := 0; i < len(inner); i++ {
			if inner[i] == '\\' && i+1 < len(inner) {
				i++
			}
			b.WriteByte(inner[i])
		}
		s = b.String()
	}
	if !strings.Contains(s, "%") {
		if !utf8.ValidString(s) {
			return "", ErrBadPercentEncoding
		}
		return s, nil
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			out = append(out, s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", ErrBadPercentEncoding
		}
		hi, ok1 := unhex(s[i+1])
		lo, ok2 := unhex(s[i+2])
		if !ok1 || !ok2 {
			return "", ErrBadPercentEncoding
		}
		out = append(out, hi<<4|lo)
		i += 2
	}
	if !utf8.Valid(out) {
		return "", ErrBadPercentEncoding
	}
	return string(out), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
