// Package redial is the reconnect loop the adapters that keep their own
// connection share (amqpbroker, mqttbroker): dial again with capped
// exponential backoff and jitter until it works or the adapter closes.
// The client libraries (amqp091-go, paho.golang) do not reconnect by
// themselves, which is why this is written here.
package redial

import (
	"math/rand/v2"
	"time"
)

// Delay is the wait before reconnect attempt n (from 0): 100 ms doubling
// up to 5 s, plus up to 20 % jitter so that relays do not reconnect in
// lockstep.
func Delay(n int) time.Duration {
	d := 100 * time.Millisecond << min(max(n, 0), 6)
	d = min(d, 5*time.Second)
	return d + rand.N(d/5+1)
}

// Until waits Delay(attempt) and calls dial, attempt after attempt, until
// dial succeeds or stop is closed; it passes each dial error to failed. It
// returns what dial made, or false once stop is closed (then nothing was
// made).
func Until[T any](stop <-chan struct{}, dial func() (T, error), failed func(error)) (T, bool) {
	var zero T
	for attempt := 0; ; attempt++ {
		t := time.NewTimer(Delay(attempt))
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return zero, false
		}
		c, err := dial()
		if err == nil {
			return c, true
		}
		failed(err)
	}
}
