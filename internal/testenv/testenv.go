// Package testenv finds the real servers the tests run against. Each server's
// address comes from an environment variable with a loopback default. When a
// server does not answer, a test fails under CI (CI=true) and skips locally
// with one line naming the variable to set. OutboxBinary builds the outbox
// command for tests that run it as users do, as a process of its own.
package testenv

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox/internal/redact"
)

// Service names a server the tests need.
type Service struct {
	Name    string // human name, e.g. "PostgreSQL"
	Env     string // variable that overrides the address
	Default string // URL used when Env is unset
}

// The servers the tests use (README.md, "Two commands").
var (
	Postgres = Service{"PostgreSQL", "OUTBOX_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"}
	MySQL    = Service{"MariaDB/MySQL", "OUTBOX_TEST_MYSQL", "mysql://root@127.0.0.1:3306/test"}
	NATS     = Service{"NATS JetStream", "OUTBOX_TEST_NATS", "nats://127.0.0.1:4222"}
	Redis    = Service{"Redis", "OUTBOX_TEST_REDIS", "redis://127.0.0.1:6379/0"}
	RabbitMQ = Service{"RabbitMQ", "OUTBOX_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/"}
	MQTT     = Service{"Mosquitto MQTT", "OUTBOX_TEST_MQTT", "mqtt://127.0.0.1:1883"}
)

// URL returns the service's URL from its variable or the default.
func (s Service) URL() string {
	if v := os.Getenv(s.Env); v != "" {
		return v
	}
	return s.Default
}

// InCI reports whether the tests run under CI, where a missing service is a
// failure.
func InCI() bool { return os.Getenv("CI") == "true" || os.Getenv("CI") == "1" }

// Require returns the service URL after checking that its TCP port answers.
// Under CI an unreachable service fails the test; locally it skips.
func Require(t testing.TB, s Service) string {
	t.Helper()
	raw := s.URL()
	if err := dial(raw); err != nil {
		Unavailable(t, s, err)
	}
	return raw
}

// Unavailable fails (CI) or skips (locally) t because s cannot be used.
func Unavailable(t testing.TB, s Service, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s unreachable at %s (%v): start it (bash scripts/services.sh starts the local PostgreSQL, MariaDB and NATS) or set %s to its URL", s.Name, Mask(s.URL()), err, s.Env)
	if InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func dial(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	host := u.Host
	if i := strings.LastIndex(host, "@"); i >= 0 {
		host = host[i+1:]
	}
	if strings.Contains(host, ",") {
		host = strings.Split(host, ",")[0]
	}
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// Mask hides a URL's secrets (see internal/redact).
func Mask(raw string) string { return redact.URL(raw) }
