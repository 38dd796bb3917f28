package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox/store/pgstore"
)

// A URL pgx cannot parse is ErrBadURL (the CLI exits 2 on it); a server
// that cannot be reached is not, and is told in one line, each dial
// error once, without the password.
func TestOpenErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tt := range []struct {
		url, want string
		badURL    bool
	}{
		{"postgres://u:hunter22@127.0.0.1:5432/test?sslmode=bogus", "sslmode is invalid", true},
		{"postgres://u:hunter22@127.0.0.1:5432/test?connect_timeout=abc", "invalid connect_timeout", true},
		{"postgres://u:hunter22@[::1", "bad database URL", true},
		{"postgres://a b:hunter22@127.0.0.1/test", "bad database URL", true},
		{"postgres://u:hunter22@127.0.0.1:1/test", "cannot reach 127.0.0.1:1: user=u database=test: ", false},
	} {
		_, err := pgstore.Open(ctx, tt.url, pgstore.Config{})
		if err == nil {
			t.Errorf("Open(%s) succeeded", tt.url)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tt.want) || strings.Contains(msg, "hunter22") || strings.ContainsAny(msg, "\n\t") {
			t.Errorf("Open: %q; want one line containing %q, without the password", msg, tt.want)
		}
		if errors.Is(err, pgstore.ErrBadURL) != tt.badURL {
			t.Errorf("Open: errors.Is(%q, ErrBadURL) = %v, want %v", msg, !tt.badURL, tt.badURL)
		}
		if !tt.badURL && strings.Count(msg, "connection refused") != 1 {
			t.Errorf("Open: %q repeats the dial error", msg)
		}
	}
}
