package redact

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
)

// Handler wraps h so that every log record's message and every string,
// error and fmt.Stringer attribute (in groups too, and those added with
// WithAttrs) pass through [Text] with raws before h sees them: a driver's
// error that echoes a connection string is logged with its secret masked.
func Handler(h slog.Handler, raws ...string) slog.Handler {
	return &handler{next: h, raws: raws}
}

type handler struct {
	next slog.Handler
	raws []string
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, Text(r.Message, h.raws...), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = h.attr(a)
	}
	return &handler{next: h.next.WithAttrs(clean), raws: h.raws}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{next: h.next.WithGroup(name), raws: h.raws}
}

// attr returns a with its text scrubbed.
func (h *handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, Text(v.String(), h.raws...))
	case slog.KindGroup:
		g := v.Group()
		clean := make([]any, len(g))
		for i, x := range g {
			clean[i] = h.attr(x)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, Text(x.Error(), h.raws...))
		case fmt.Stringer:
			return slog.String(a.Key, Text(x.String(), h.raws...))
		case []byte:
			return slog.String(a.Key, Text(string(x), h.raws...))
		default:
			// A struct or map keeps its shape unless its printed form
			// holds a secret. JSON is the form scanned: fmt's map[k:v]
			// puts a ':' before a URL, where Text does not look for one.
			s := fmt.Sprint(x)
			if b, err := json.Marshal(x); err == nil {
				s = string(b)
			}
			if Text(s, h.raws...) != s {
				return slog.String(a.Key, Text(s, h.raws...))
			}
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
