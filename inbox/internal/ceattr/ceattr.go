// Package ceattr turns the CloudEvents attributes a transport carried into
// an inbox.Message, the same way for every transport helper.
package ceattr

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/inbox"
)

// ErrConflict is the Err of a *inbox.HeaderError when one attribute arrives
// twice with different values.
var ErrConflict = errors.New("the attribute appears more than once with different values")

// Builder collects one message's attributes. The first error wins; later
// calls are ignored.
type Builder struct {
	Msg  inbox.Message
	err  error
	from map[string]string // attribute → header it came from
	vals map[string]string // attribute → raw value, for conflict checks
}

// Err returns the first error so far.
func (b *Builder) Err() error { return b.err }

// Fail records err unless an error was recorded already.
func (b *Builder) Fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// Has reports whether attribute name was set.
func (b *Builder) Has(name string) bool {
	_, ok := b.from[name]
	return ok
}

// Attr applies the CloudEvents attribute name (lower-case, no prefix),
// read from header with value already decoded from the transport's
// encoding.
func (b *Builder) Attr(header, name, value string) {
	if b.err != nil {
		return
	}
	name = strings.ToLower(name)
	if prev, ok := b.vals[name]; ok {
		if prev != value {
			b.Fail(inbox.NewHeaderError(header, value, fmt.Errorf("%w (%s was %q)", ErrConflict, b.from[name], shortValue(prev))))
		}
		return
	}
	if b.from == nil {
		b.from, b.vals = map[string]string{}, map[string]string{}
	}
	b.from[name], b.vals[name] = header, value
	if !utf8.ValidString(value) || strings.ContainsRune(value, 0) {
		b.Fail(inbox.NewHeaderError(header, strings.ToValidUTF8(value, "\uFFFD"), inbox.ErrInvalidText))
		return
	}
	switch name {
	case broker.AttrID:
		id, err := inbox.ParseEventID(value)
		if err != nil {
			b.Fail(inbox.NewHeaderError(header, value, err))
			return
		}
		b.Msg.EventID = id
	case broker.AttrType:
		b.Msg.Type = value
	case broker.AttrSource:
		b.Msg.Source = value
	case broker.AttrPartitionKey:
		b.Msg.Key = value
	case broker.AttrAggregateType:
		b.Msg.AggregateType = value
	case broker.AttrDataContentType:
		b.Msg.ContentType = value
	case broker.AttrSpecVersion:
		// Only 1.x exists; nothing in the message depends on it.
	case broker.AttrTime:
		t, err := inbox.ParseTime(value)
		if err != nil {
			b.Fail(inbox.NewHeaderError(header, value, err))
			return
		}
		b.Msg.Time = t
	case broker.AttrSchemaVersion:
		v, err := inbox.ParseSchemaVersion(value)
		if err != nil {
			b.Fail(inbox.NewHeaderError(header, value, err))
			return
		}
		b.Msg.SchemaVersion = v
	default:
		if b.Msg.Extensions == nil {
			b.Msg.Extensions = map[string]string{}
		}
		b.Msg.Extensions[name] = value
	}
}

// Header keeps one of the producer's own headers; the first value of a
// name wins.
func (b *Builder) Header(name, value string) {
	if b.Msg.Headers == nil {
		b.Msg.Headers = map[string]string{}
	}
	if _, ok := b.Msg.Headers[name]; !ok {
		b.Msg.Headers[name] = value
	}
}

// Finish returns the message, or the first error. lookedFor names the
// headers that could have carried the event id, for the error when none
// did.
func (b *Builder) Finish(lookedFor string) (inbox.Message, error) {
	if b.err != nil {
		return inbox.Message{}, b.err
	}
	if b.Msg.EventID == "" {
		if ct := strings.ToLower(b.Msg.ContentType); strings.HasPrefix(ct, "application/cloudevents") {
			return inbox.Message{}, fmt.Errorf("%w: this is a structured-mode CloudEvent (content type %q); only binary mode, as the outbox relay sends it, is read: decode the JSON envelope yourself and fill inbox.Message", inbox.ErrMissingEventID, b.Msg.ContentType)
		}
		return inbox.Message{}, fmt.Errorf("%w (looked for %s)", inbox.ErrMissingEventID, lookedFor)
	}
	if b.Msg.SchemaVersion == 0 {
		b.Msg.SchemaVersion = 1
	}
	return b.Msg, nil
}

func shortValue(s string) string {
	if len(s) <= 40 {
		return s
	}
	cut := 40
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
