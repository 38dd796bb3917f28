package redact_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/outbox-go/outbox/internal/redact"
)

// Every place a secret can reach a log line: the message, a string, an
// error, a Stringer, a group, WithAttrs, a map; in text and JSON.
func TestHandlerMasksEverySecret(t *testing.T) {
	const dsn = "postgres://app:s3cret@db:5432/shop"
	u, _ := url.Parse("amqp://guest:hunter2@mq:5672/")
	for name, mk := range map[string]func(*bytes.Buffer) slog.Handler{
		"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		"json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var buf bytes.Buffer
		log := slog.New(redact.Handler(mk(&buf), "nats://tok3n@broker:4222"))
		log = log.With("db", dsn, slog.Group("conn", "url", dsn))
		log.Warn("cannot reach "+dsn, "error", errors.New(`dial "nats://tok3n@broker:4222" refused`),
			"broker", u, "params", map[string]string{"url": dsn}, "count", 3, "raw", []byte("password=pw1 x"),
			slog.Group("g", "inner", "redis://:r3dis@cache:6379/0"))
		out := buf.String()
		for _, secret := range []string{"s3cret", "hunter2", "tok3n", "pw1", "r3dis"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s: the log shows %q:\n%s", name, secret, out)
			}
		}
		for _, kept := range []string{"cannot reach postgres://app:", "db:5432/shop", "count", "3", "conn", "inner"} {
			if !strings.Contains(out, kept) {
				t.Errorf("%s: the log lost %q:\n%s", name, kept, out)
			}
		}
	}
}

// A line without secrets comes out as the wrapped handler writes it.
func TestHandlerLeavesCleanLinesAlone(t *testing.T) {
	var plain, wrapped bytes.Buffer
	rec := func(l *slog.Logger) {
		l.Info("relay started", "owner", "host-1", "batch", 500, "m", map[string]int{"a": 1})
	}
	rec(slog.New(slog.NewJSONHandler(&plain, &slog.HandlerOptions{ReplaceAttr: dropTime})))
	rec(slog.New(redact.Handler(slog.NewJSONHandler(&wrapped, &slog.HandlerOptions{ReplaceAttr: dropTime}))))
	if plain.String() != wrapped.String() {
		t.Errorf("wrapped %q, plain %q", wrapped.String(), plain.String())
	}
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}
