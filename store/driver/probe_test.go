package driver_test

import (
	"testing"
	"time"

	"github.com/outbox-go/outbox/store/driver"
)

// ticks counts the ticks of p within d.
func ticks(p *driver.ProbePace, d time.Duration) int {
	n := 0
	end := time.After(d)
	for {
		select {
		case <-p.C():
			n++
			p.Looked()
		case <-end:
			return n
		}
	}
}

// A probe looks every interval while it finds commits, and
// ProbeIdleFactor times less often once it found none for ProbeIdleAfter;
// the next commit found brings the full pace back, and Hold (a drain)
// slows it down at once.
func TestProbePaceSlowsDownWhenIdle(t *testing.T) {
	p := driver.NewProbePace(10 * time.Millisecond)
	defer p.Stop()
	busy := ticks(p, 500*time.Millisecond)
	ticks(p, driver.ProbeIdleAfter) // nothing found for a second
	idle := ticks(p, 500*time.Millisecond)
	p.Found()
	again := ticks(p, 500*time.Millisecond)
	t.Logf("ticks in 500 ms: busy %d, idle %d, after a commit %d", busy, idle, again)
	if busy < 20 || again < 20 {
		t.Errorf("busy %d, after a commit %d ticks in 500 ms at a 10 ms interval; want about 50", busy, again)
	}
	if idle > 15 {
		t.Errorf("idle: %d ticks in 500 ms; want about %d", idle, 50/driver.ProbeIdleFactor)
	}
	p.Hold() // the relays drain a backlog
	if held := ticks(p, 500*time.Millisecond); held > 15 {
		t.Errorf("held: %d ticks in 500 ms; want about %d", held, 50/driver.ProbeIdleFactor)
	}
}
