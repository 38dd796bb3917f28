package redial

import (
	"errors"
	"testing"
	"time"
)

func TestDelayGrowsAndCaps(t *testing.T) {
	for n, want := range map[int]time.Duration{0: 100 * time.Millisecond, 1: 200 * time.Millisecond, 3: 800 * time.Millisecond, 6: 5 * time.Second, 60: 5 * time.Second} {
		for range 50 {
			if d := Delay(n); d < want || d > want+want/5 {
				t.Fatalf("Delay(%d) = %v, want within [%v, %v]", n, d, want, want+want/5)
			}
		}
	}
}

func TestUntilRetriesThenReturns(t *testing.T) {
	calls, failures := 0, 0
	c, ok := Until(make(chan struct{}), func() (int, error) {
		calls++
		if calls < 2 {
			return 0, errors.New("refused")
		}
		return 7, nil
	}, func(error) { failures++ })
	if !ok || c != 7 || calls != 2 || failures != 1 {
		t.Fatalf("Until = %d, %v after %d calls, %d failures; want 7, true, 2, 1", c, ok, calls, failures)
	}
}

func TestUntilStops(t *testing.T) {
	stop := make(chan struct{})
	close(stop)
	if _, ok := Until(stop, func() (int, error) { t.Fatal("dialled after stop"); return 0, nil }, func(error) {}); ok {
		t.Fatal("Until reported a connection after stop")
	}
}
