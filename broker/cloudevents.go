package broker

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/eventrule"
)

// CloudEvents context attribute names, without a transport prefix. Each
// adapter adds its binding's prefix: "ce-" for NATS and HTTP, "ce_" for
// Kafka, "cloudEvents:" for AMQP.
const (
	AttrID              = "id"              // Event.EventID
	AttrSource          = "source"          // the adapter's configured source; SourceDefault when none
	AttrSpecVersion     = "specversion"     // always SpecVersion
	AttrType            = "type"            // Event.Type; required (CheckCloudEvent refuses an empty one)
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

// CheckCloudEvent returns why e cannot be sent as a valid CloudEvent, or
// nil: an id that is not a UUID, an empty type, a type, key (partitionkey),
// aggregate type or content type that is not a CloudEvents string (invalid
// UTF-8, a control character U+0000–U+001F or U+007F–U+009F, a Unicode
// noncharacter), or a negative schema version. outbox.Validate refuses the
// same at enqueue; rows written by plain SQL can still carry them, and an
// adapter returns the error as Permanent, so the event goes DEAD with the
// reason instead of reaching consumers as an invalid event. The error names
// the field and its column and wraps outbox.ErrInvalidMessage and a more
// specific sentinel. It reads each string once and allocates nothing for a
// valid event.
func CheckCloudEvent(e *outbox.Event) error {
	if !isUUID(e.EventID) {
		if e.EventID == "" {
			return invalid("id (event_id)", outbox.ErrInvalidEventID, "it is empty; leave event_id out of the INSERT so the database sets a UUID")
		}
		return invalid("id (event_id)", outbox.ErrInvalidEventID, fmt.Sprintf("%q is not a UUID in the form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, which consumers (package inbox) deduplicate on", clipValue(e.EventID)))
	}
	if e.Type == "" {
		return invalid("type (event_type)", outbox.ErrEmptyType, "CloudEvents requires a non-empty type; set event_type to what happened, e.g. 'OrderPaid'")
	}
	for _, f := range [...]struct{ name, val string }{
		{"type (event_type)", e.Type}, {"partitionkey (event_key)", e.Key},
		{"aggregatetype (aggregate_type)", e.AggregateType}, {"datacontenttype (content_type)", e.ContentType},
	} {
		if err := checkString(f.name, f.val); err != nil {
			return err
		}
	}
	if e.SchemaVersion < 0 {
		return invalid("schemaversion (schema_version)", outbox.ErrInvalidMessage, fmt.Sprintf("it is %d; use 1 or a positive version", e.SchemaVersion))
	}
	return nil
}

// CheckEvent is CheckCloudEvent followed by CheckHeaders(t, e.Headers):
// whether e can be sent over t as a valid CloudEvent with its user headers
// unchanged.
func CheckEvent(t Transport, e *outbox.Event) error {
	if err := CheckCloudEvent(e); err != nil {
		return err
	}
	return CheckHeaders(t, e.Headers)
}

// CheckSource returns why source cannot be the CloudEvents source
// attribute, or nil; "" stands for SourceDefault. Adapters check their
// configured source once, when they are built.
func CheckSource(source string) error {
	return checkString("source", source)
}

func checkString(field, s string) error {
	switch p, r, at := eventrule.CheckText(s); p {
	case eventrule.TextInvalidUTF8:
		return invalid(field, outbox.ErrInvalidText, fmt.Sprintf("byte %d is not valid UTF-8", at))
	case eventrule.TextControl:
		return invalid(field, outbox.ErrInvalidText, fmt.Sprintf("it holds the control character %U at byte %d, which CloudEvents strings exclude (U+0000–U+001F, U+007F–U+009F); remove it", r, at))
	case eventrule.TextNoncharacter:
		return invalid(field, outbox.ErrInvalidText, fmt.Sprintf("it holds the Unicode noncharacter %U at byte %d, which CloudEvents strings exclude; remove it", r, at))
	}
	return nil
}

// invalid is the error of a CloudEvents attribute that cannot be sent.
func invalid(field string, sentinel error, why string) error {
	return fmt.Errorf("not a valid CloudEvent: %s: %w: %s (%w)", field, sentinel, why, outbox.ErrInvalidMessage)
}

// isUUID reports whether s is a UUID in its canonical 36-character form,
// the form outbox.Validate requires and package inbox parses.
func isUUID(s string) bool {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return false
	}
	for _, seg := range [...]string{s[:8], s[9:13], s[14:18], s[19:23], s[24:]} {
		for i := 0; i < len(seg); i++ {
			if !isHex[seg[i]] {
				return false
			}
		}
	}
	return true
}

var isHex = func() (t [256]bool) {
	for _, c := range "0123456789abcdefABCDEF" {
		t[c] = true
	}
	return t
}()

// clipValue shortens a value quoted in an error message.
func clipValue(s string) string {
	if len(s) <= 60 {
		return s
	}
	cut := 60
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
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

// PercentEncodedLen is len(PercentEncode(s)), without encoding: for
// adapters that size a message before they build it.
func PercentEncodedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if needsPercent(s[i]) {
			n += 2
		}
	}
	return n
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
