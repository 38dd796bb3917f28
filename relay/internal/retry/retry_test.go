package retry

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/outbox-go/outbox/broker"
)

func TestBackoff(t *testing.T) {
	for _, c := range []struct {
		attempt int
		want    time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {4, 8 * time.Second}, {11, 10 * time.Minute}, {math.MaxInt32, 10 * time.Minute}} {
		if got := Backoff(time.Second, 10*time.Minute, c.attempt); got != c.want {
			t.Errorf("Backoff(1s, 10m, %d) = %s, want %s", c.attempt, got, c.want)
		}
	}
}

func TestDelay(t *testing.T) {
	for range 100 {
		if d := Delay(time.Millisecond, 4*time.Millisecond, 5, errors.New("x")); d < 0 || d > 4*time.Millisecond {
			t.Fatalf("Delay = %s, want within [0, 4ms]", d)
		}
		if d := Delay(time.Millisecond, 4*time.Millisecond, 1, broker.RetryAfter(errors.New("busy"), time.Minute)); d != time.Minute {
			t.Fatalf("Delay with a Retry-After of 1m = %s", d)
		}
	}
	if Jitter(0) != 0 || Jitter(-time.Second) != 0 {
		t.Fatal("Jitter of nothing is not zero")
	}
}

func TestDead(t *testing.T) {
	if dead, why := Dead(broker.Permanent(errors.New("rejected")), 1, 25); !dead || why != "permanent: rejected" {
		t.Errorf("permanent: %v %q", dead, why)
	}
	if dead, why := Dead(errors.New("timeout"), 3, 3); !dead || why != "gave up after 3 attempts: timeout" {
		t.Errorf("out of attempts: %v %q", dead, why)
	}
	if dead, _ := Dead(errors.New("timeout"), 2, 3); dead {
		t.Error("DEAD before the last attempt")
	}
}

func TestJitterOfTheLongestDuration(t *testing.T) {
	if d := Jitter(time.Duration(math.MaxInt64)); d < 0 {
		t.Fatalf("Jitter(MaxInt64) = %v", d)
	}
}
