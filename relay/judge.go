package relay

import (
	"context"
	"errors"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/relay/internal/retry"
)

// verdict is what one publish result means for its event.
type verdict int8

const (
	// confirmed: the broker has it.
	confirmed verdict = iota + 1
	// givenBack: not the event's fault, so no attempt is counted: it was
	// held behind an earlier failure of its key in the same call, not
	// attempted by the adapter (behind a failure of its ordered unit, a
	// Kafka partition shared with another key), cut short by a stop or a
	// lost lease, or the broker could not be reached at all. It goes
	// again, and its key's later events wait behind it.
	givenBack
	// retried: it failed; it goes again after a backoff.
	retried
	// dead: refused for good, or out of attempts.
	dead
)

// judgement is one event's verdict.
type judgement struct {
	verdict verdict
	attempt int    // retried, dead: failed attempts, this one included
	err     error  // retried, dead: the broker's error
	reason  string // dead: the last error the event carries
}

// callJudgement is one publish call's verdicts, and what the call says of
// the broker.
type callJudgement struct {
	each      []judgement
	confirmed int
	// unavailable is the call's first broker.ErrUnavailable result: the
	// broker could not be reached at all.
	unavailable error
	// failing is set when the call confirmed nothing and its first
	// attempt failed with a transient error: the broker failing as a
	// whole (not one full stream or one refused event).
	failing error
}

// brokerErr is the broker's failure the call shows, for backoff and
// Health: unreachable, or failing as a whole; nil when neither.
func (j callJudgement) brokerErr() error {
	if j.unavailable != nil {
		return j.unavailable
	}
	return j.failing
}

// retryDelay is the wait before the next attempt after attempt failed
// ones, the last with err.
func (r *Relay) retryDelay(attempt int, err error) time.Duration {
	return retry.Delay(r.cfg.BackoffBase, r.cfg.BackoffMax, attempt, err)
}

// brokerHealth records the broker's state after a batch or a call: failing
// with err, or recovered when events were confirmed.
func (r *Relay) brokerHealth(err error, confirmed int) {
	if err != nil {
		r.health.set(&r.health.broker, err)
	} else if confirmed > 0 {
		r.health.set(&r.health.broker, nil)
	}
}

// judge decides what each result of one publish call means. It is the one
// rule for a store's batches and a source's events alike. cutShort says
// the publish's context ended (a stop, a lost lease): a call it cancelled
// is no attempt. An event's failed attempts so far are its Attempts.
func (r *Relay) judge(send []outbox.Event, results []broker.Result, cutShort bool) callJudgement {
	j := callJudgement{each: make([]judgement, len(send))}
	var failedKeys map[string]bool
	var firstErr error
	for i, e := range send {
		err := results[i].Err
		if err == nil {
			j.each[i].verdict = confirmed
			j.confirmed++
			continue
		}
		j.each[i].verdict = givenBack
		held := e.Key != "" && failedKeys[e.Key]
		if e.Key != "" {
			if failedKeys == nil {
				failedKeys = map[string]bool{}
			}
			failedKeys[e.Key] = true
		}
		switch {
		case errors.Is(err, broker.ErrNotAttempted), held:
			// not sent, or (a key-ordered broker sends a key's events
			// together and fails the rest after the first failure) held
			// back: it cannot go DEAD untried behind a flaky predecessor
			continue
		case cutShort && errors.Is(err, context.Canceled):
			continue
		case errors.Is(err, broker.ErrUnavailable):
			if j.unavailable == nil {
				j.unavailable = err
			}
			continue
		}
		if firstErr == nil {
			firstErr = err
		}
		attempt := e.Attempts + 1
		j.each[i] = judgement{verdict: retried, attempt: attempt, err: err}
		if isDead, reason := retry.Dead(err, attempt, r.cfg.MaxAttempts); isDead {
			j.each[i].verdict, j.each[i].reason = dead, reason
		}
	}
	if j.confirmed == 0 && firstErr != nil && !broker.IsPermanent(firstErr) {
		j.failing = firstErr
	}
	return j
}
