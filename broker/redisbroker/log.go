package redisbroker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// LogTo sends go-redis's own log lines (dial failures of its pool, which it
// otherwise prints to stderr on its own) to l at debug level, so that they
// share the process's format and secret masking. The same errors reach
// the relay as publish results; these lines only add detail. go-redis has
// one logger per process, so this affects every go-redis client in it.
func LogTo(l *slog.Logger) {
	redis.SetLogger(slogPrintf{l})
}

// slogPrintf is go-redis's Logging interface over a slog.Logger.
type slogPrintf struct{ l *slog.Logger }

func (p slogPrintf) Printf(ctx context.Context, format string, v ...any) {
	p.l.DebugContext(ctx, "redisbroker: go-redis: "+strings.TrimSpace(fmt.Sprintf(format, v...)))
}
