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

// The zero Config orders by ownership when the store implements
// store.Owned; Exclusion opts out; the deprecated Ownership is accepted
// alone (it changes nothing) and refused beside Exclusion; a store
// without store.Owned orders by exclusion whatever the Config says.
func TestEngineChoice(t *testing.T) {
	st := teststores.Open(t, "sqlite", store.Options{}).Store
	mb := newMem(t, membroker.Config{})
	for _, c := range []struct {
		name  string
		st    store.Store
		cfg   relay.Config
		owned bool
	}{
		{"zero Config", st, relay.Config{}, true},
		{"Exclusion", st, relay.Config{Exclusion: true}, false},
		{"deprecated Ownership", st, relay.Config{Ownership: true}, true},
		{"a store without store.Owned", struct{ store.Store }{st}, relay.Config{}, false},
	} {
		r, err := relay.New(c.st, mb, c.cfg)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := r.Health().Owned; got != c.owned {
			t.Errorf("%s: Health().Owned = %v, want %v", c.name, got, c.owned)
		}
	}
	_, err := relay.New(st, mb, relay.Config{Ownership: true, Exclusion: true})
	if err == nil || !strings.Contains(err.Error(), "Ownership and Exclusion") {
		t.Errorf("Ownership and Exclusion together: err = %v, want a refusal naming both", err)
	}
}
