package broker

import (
	"errors"
	"time"
)

// RetryAfterError is a transient error from a broker that said when to try
// again (an HTTP 429 or 503 with Retry-After): the relay waits at least
// After before the event's next attempt, however short its own backoff.
type RetryAfterError struct {
	Err   error
	After time.Duration
}

func (e *RetryAfterError) Error() string { return e.Err.Error() }

// Unwrap returns the error the broker reported.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter wraps err with the delay the broker asked for; a delay of 0 or
// less, or a nil err, returns err unchanged.
func RetryAfter(err error, after time.Duration) error {
	if err == nil || after <= 0 {
		return err
	}
	return &RetryAfterError{Err: err, After: after}
}

// RetryAfterOf returns the longest delay err asks for (see RetryAfter), or
// 0 when it asks for none.
func RetryAfterOf(err error) time.Duration {
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		return ra.After
	}
	return 0
}
