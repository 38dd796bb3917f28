package redisbroker

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

func TestLogToSlog(t *testing.T) {
	var buf bytes.Buffer
	slogPrintf{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}.Printf(context.Background(), "redis: dial %s: refused\n", "127.0.0.1:1")
	if got := buf.String(); !strings.Contains(got, "level=DEBUG") || !strings.Contains(got, "redisbroker: go-redis: redis: dial 127.0.0.1:1: refused") {
		t.Fatalf("logged %q", got)
	}
}
