package relay_test

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

func TestNegativeSettingsAreRefusedByName(t *testing.T) {
	st := teststores.Open(t, "sqlite", store.Options{}).Store
	mb := newMem(t, membroker.Config{})
	for _, c := range []struct {
		field string
		cfg   relay.Config
	}{
		{"BatchSize", relay.Config{BatchSize: -1}},
		{"Workers", relay.Config{Workers: -1}},
		{"MaxInflightBytes", relay.Config{MaxInflightBytes: -1}},
		{"LeaseFor", relay.Config{LeaseFor: -time.Second}},
		{"PublishTimeout", relay.Config{PublishTimeout: -time.Second}},
		{"PollInterval", relay.Config{PollInterval: -time.Millisecond}},
		{"MaxAttempts", relay.Config{MaxAttempts: -3}},
		{"BackoffBase", relay.Config{BackoffBase: -time.Second}},
		{"BackoffMax", relay.Config{BackoffMax: -time.Second}},
		{"DrainTimeout", relay.Config{DrainTimeout: -time.Second}},
	} {
		_, err := relay.New(st, mb, c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s negative: err = %v, want an error naming %s", c.field, err, c.field)
		}
	}
	if _, err := relay.New(st, mb, relay.Config{}); err != nil {
		t.Errorf("zero Config: %v", err)
	}
}
