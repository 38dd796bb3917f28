package relay_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/membroker"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// lateRenewals is a real store whose lease renewals of one claim (the
// first that takes the event with payload target) run in the database
// only as their client gives up, and report the client's error: a renewal
// that timed out on the relay's side and still renewed the lease, as a
// statement that outlives its cancelled client does on a loaded server.
type lateRenewals struct {
	driver.Store
	own    driver.Driver
	target string

	mu    sync.Mutex
	lease driver.Lease
	found bool
	late  atomic.Int32 // late renewals run
}

func (s *lateRenewals) Balance(ctx context.Context, req driver.BalanceParams) (driver.Ownership, error) {
	return s.own.Balance(ctx, req)
}

func (s *lateRenewals) Claim(ctx context.Context, req driver.ClaimParams) (driver.Claim, error) {
	c, err := s.own.Claim(ctx, req)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range c.Events {
		if string(e.Payload) == s.target && !s.found {
			s.lease, s.found = c.Lease, true
		}
	}
	return c, err
}

func (s *lateRenewals) Extend(ctx context.Context, p driver.ExtendParams) (time.Time, error) {
	lease, ids, d := p.Lease, p.IDs, p.For
	s.mu.Lock()
	late := s.found && lease == s.lease
	s.mu.Unlock()
	if !late {
		return s.Store.Extend(ctx, driver.ExtendParams{Lease: lease, IDs: ids, For: d})
	}
	<-ctx.Done()
	if _, err := s.Store.Extend(context.WithoutCancel(ctx), driver.ExtendParams{Lease: lease, IDs: ids, For: d}); err == nil {
		s.late.Add(1)
	}
	return time.Time{}, fmt.Errorf("extend: %w", ctx.Err())
}

// A batch whose outcome could not be written keeps its keys waiting until
// its lease has surely run out in the store, also when a renewal that
// failed on the relay's side renewed it in the database after all: the
// key's next event is not published while the failed one is still leased
// to the relay (issue 11: "k#5 delivered while k#1 failed"). Before the
// fix the wait ended LeaseFor/2 after the last renewal that succeeded, and
// k#2 went out ahead of k#1.
func TestOwnedLateRenewalKeepsKeyWaiting(t *testing.T) {
	forEachOpened(t, func(t *testing.T, o teststores.Opened) {
		ctx := context.Background()
		st := &lateRenewals{Store: o.Store, own: o.Store, target: "k#1"}
		const leaseFor = 2 * time.Second
		mb := newMem(t, membroker.Config{})
		var tries atomic.Int32
		mb.SetHook(func(e outbox.Event) error {
			if string(e.Payload) == "k#1" && tries.Add(1) == 1 {
				// slow enough for the late renewals to make the relay
				// give the lease up, then failed
				time.Sleep(leaseFor * 6 / 5)
				return errors.New("timeout")
			}
			return nil
		})
		msgs := []outbox.Message{
			{Topic: "t", Key: "k", Type: "T", Payload: []byte("k#1")},
			{Topic: "t", Key: "k", Type: "T", Payload: []byte("k#2")},
		}
		if err := o.Store.Enqueue(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
		cfg := fastConfig()
		cfg.LeaseFor = leaseFor
		cfg.BatchSize = 1 // k#2 in a batch of its own, claimed while k#1 is in flight
		cfg.Workers = 2
		cfg.Logger = failureLog(t)
		run(t, st, mb, cfg)
		waitFor(t, "delivery", time.Minute, func() bool { return pending(t, o.Store).Pending() == 0 })
		if st.late.Load() == 0 {
			t.Fatal("no late renewal ran: the test did not set up its case")
		}
		checkDelivered(t, msgs, mb.Events("t"))
	})
}
