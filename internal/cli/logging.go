package cli

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/outbox-go/outbox/broker/redisbroker"
	"github.com/outbox-go/outbox/internal/redact"
	"github.com/outbox-go/outbox/internal/wire"
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
	l := slog.New(redact.Handler(h, raws...))
	// go-redis prints its pool's dial failures on its own; route them here.
	redisbroker.LogTo(l)
	return l, nil
}
