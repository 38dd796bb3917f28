package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/internal/teststores"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
)

type obs struct{ t *testing.T }

func (o obs) Settled(r relay.BatchReport) { o.t.Logf("batch %d in %s", r.Claimed, r.Duration) }

func TestZZProf(t *testing.T) {
	st := teststores.Open(t, "postgres", store.Options{}).Store
	msgs := make([]outbox.Message, 20000)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "t", Key: fmt.Sprintf("order-%d", i%5000), Payload: []byte(`{"order_id":42}`)}
	}
	for i := 0; i < len(msgs); i += 5000 {
		st.Enqueue(context.Background(), msgs[i:i+5000]...)
	}
	mb, _ := membroker.New(membroker.Config{})
	cfg := fastConfig()
	cfg.BatchSize = 1000
	cfg.Observer = obs{t}
	r, _ := run(t, timed{st, t}, mb, cfg)
	start := time.Now()
	for r.Totals().Delivered.Load() < 20000 {
		time.Sleep(time.Millisecond)
	}
	t.Logf("drain %.0f ev/s", 20000/time.Since(start).Seconds())
}

type timed struct {
	store.Store
	t *testing.T
}

func (s timed) Claim(ctx context.Context, r store.ClaimRequest) (store.Claim, error) {
	start := time.Now()
	c, err := s.Store.Claim(ctx, r)
	s.t.Logf("claim %d: %s %v", len(c.Events), time.Since(start), err)
	return c, err
}
func (s timed) Ack(ctx context.Context, l store.Lease, ids []int64) error {
	start := time.Now()
	err := s.Store.Ack(ctx, l, ids)
	s.t.Logf("ack %d: %s %v", len(ids), time.Since(start), err)
	return err
}
func (s timed) Extend(ctx context.Context, l store.Lease, ids []int64, d time.Duration) (time.Time, error) {
	start := time.Now()
	u, err := s.Store.Extend(ctx, l, ids, d)
	s.t.Logf("extend %d: %s %v", len(ids), time.Since(start), err)
	return u, err
}
