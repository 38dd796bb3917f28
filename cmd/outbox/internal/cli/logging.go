package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/outbox-go/outbox/broker/redisbroker"
	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/internal/redact"
)

// newLogger builds the relay's logger: text or JSON lines on w at level,
// every message and attribute scrubbed of the secrets of URLs (those of
// raws, the --db and --broker values, even where a driver echoes them in a
// form no parser reads back).
func newLogger(w io.Writer, format, level string, raws ...string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%w: --log-level must be debug, info, warn or error, not %q", wire.ErrUsage, level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("%w: --log-format must be text or json, not %q", wire.ErrUsage, format)
	}
	l := slog.New(oneLineHandler{redact.Handler(h, raws...)})
	// go-redis prints its pool's dial failures on its own, rocketmq-client-go
	// everything through logrus; route them here.
	redisbroker.LogTo(l)
	wire.LogRocketMQTo(l)
	return l, nil
}

// oneLineHandler keeps every message and attribute on one line: pgx, for
// one, puts each connection attempt of an error on a line of its own,
// the same dial error twice with sslmode=prefer (TLS, then plain), which
// read as "\n\t…" inside a text log's error= and split a log line where
// it is not quoted.
type oneLineHandler struct{ h slog.Handler }

func (o oneLineHandler) Enabled(ctx context.Context, l slog.Level) bool { return o.h.Enabled(ctx, l) }

func (o oneLineHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, flatten(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(flattenAttr(a))
		return true
	})
	return o.h.Handle(ctx, out)
}

func (o oneLineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	flat := make([]slog.Attr, len(as))
	for i, a := range as {
		flat[i] = flattenAttr(a)
	}
	return oneLineHandler{o.h.WithAttrs(flat)}
}

func (o oneLineHandler) WithGroup(name string) slog.Handler {
	return oneLineHandler{o.h.WithGroup(name)}
}

// flattenAttr is a with its text on one line: strings, errors and other
// values printed as text; groups attribute by attribute.
func flattenAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := v.String(); strings.ContainsAny(s, "\r\n") {
			return slog.String(a.Key, flatten(s))
		}
	case slog.KindGroup:
		g := v.Group()
		flat := make([]any, len(g))
		for i, ga := range g {
			flat[i] = flattenAttr(ga)
		}
		return slog.Group(a.Key, flat...)
	case slog.KindAny:
		var s string
		switch x := v.Any().(type) {
		case error:
			s = x.Error()
		case fmt.Stringer:
			s = x.String()
		default:
			return a
		}
		if strings.ContainsAny(s, "\r\n") {
			return slog.String(a.Key, flatten(s))
		}
	}
	return a
}

// repeatOf returns what line adds to the longest earlier line it begins
// with.
func repeatOf(line string, seen map[string]bool) (string, bool) {
	best := ""
	for prev := range seen {
		if prev != line && len(prev) > len(best) && strings.HasPrefix(line, prev) {
			best = prev
		}
	}
	return line[len(best):], best != ""
}

// flatten joins the lines of s, each trimmed, dropping empty and repeated
// ones (a repeat keeps only what it adds): after a line ending in ':'
// with a space, else with "; ".
func flatten(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	var b strings.Builder
	seen := map[string]bool{}
	for _, line := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
		line = strings.TrimSpace(line)
		if line == "" || seen[line] {
			continue
		}
		seen[line] = true
		if rest, ok := repeatOf(line, seen); ok {
			// a repeat with the caller's suffix: "…refused (nothing was claimed)"
			b.WriteString(rest)
			continue
		}
		if b.Len() > 0 {
			if strings.HasSuffix(b.String(), ":") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(line)
	}
	return b.String()
}
