// Package retry holds the rules the relay applies to a failed attempt (a
// store's batches and a source's events alike): when an
// event goes DEAD and the reason it carries, and how long its next attempt
// waits.
package retry

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/outbox-go/outbox/broker"
)

// Backoff is min(limit, base·2^(attempt-1)) without overflow.
func Backoff(base, limit time.Duration, attempt int) time.Duration {
	d := base
	for i := 1; i < attempt; i++ {
		d *= 2
		if d >= limit || d <= 0 {
			return limit
		}
	}
	return min(d, limit)
}

// Jitter returns a random duration in [0, d] (full jitter).
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if d == math.MaxInt64 {
		d-- // d+1 would overflow
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// Delay is the wait before the next attempt after attempt failed ones,
// the last with err: full jitter over Backoff(base, limit, attempt), and
// never sooner than the broker asked (broker.RetryAfterOf, an HTTP
// Retry-After).
func Delay(base, limit time.Duration, attempt int, err error) time.Duration {
	return max(Jitter(Backoff(base, limit, attempt)), broker.RetryAfterOf(err))
}

// Dead reports whether a failed attempt makes its event DEAD: at once on a
// permanent error (broker.IsPermanent), or when attempt (the failed
// attempts so far, this one included) reaches maxAttempts. reason is what
// the event carries as its last error then.
func Dead(err error, attempt, maxAttempts int) (dead bool, reason string) {
	switch {
	case broker.IsPermanent(err):
		return true, "permanent: " + err.Error()
	case attempt >= maxAttempts:
		return true, fmt.Sprintf("gave up after %d attempts: %v", attempt, err)
	}
	return false, ""
}
