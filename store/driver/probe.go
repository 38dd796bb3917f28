package driver

import "time"

// ProbePace paces a store's commit probe: it looks every interval while it
// finds commits, and ProbeIdleFactor times less often once it found none
// for ProbeIdleAfter. A relay beside a busy table then finds a commit
// within about the interval, and one beside a quiet table costs the
// database a few times fewer looks.
type ProbePace struct {
	every time.Duration
	t     *time.Ticker
	last  time.Time // when the probe last found a commit
	idle  bool
}

// ProbeIdleFactor is how many times less often an idle probe looks.
const ProbeIdleFactor = 5

// ProbeIdleAfter is how long a probe finds nothing before it slows down.
const ProbeIdleAfter = time.Second

// NewProbePace returns a pace that looks every interval (> 0) to begin
// with. Stop it when done.
func NewProbePace(every time.Duration) *ProbePace {
	return &ProbePace{every: every, t: time.NewTicker(every), last: time.Now()}
}

// C receives a tick when the probe is to look.
func (p *ProbePace) C() <-chan time.Time { return p.t.C }

// Found records that the probe found a producer's commit (a new id, not
// a change the relays' own acks make too): it looks every interval.
func (p *ProbePace) Found() {
	p.last = time.Now()
	if p.idle {
		p.idle = false
		p.t.Reset(p.every)
	}
}

// Hold slows the probe to the idle pace now: the relays claim full
// batches and look again at once, so a wake-up would find them busy.
func (p *ProbePace) Hold() {
	if !p.idle {
		p.idle = true
		p.t.Reset(p.every * ProbeIdleFactor)
	}
}

// Looked is called after each look: once nothing was found for
// ProbeIdleAfter, the probe slows down.
func (p *ProbePace) Looked() {
	if time.Since(p.last) >= ProbeIdleAfter {
		p.Hold()
	}
}

// Stop stops the ticker.
func (p *ProbePace) Stop() { p.t.Stop() }
