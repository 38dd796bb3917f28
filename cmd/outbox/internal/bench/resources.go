package bench

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Usage is what the relay processes used during a phase: the peak
// resident set of each (sampled every 100 ms from /proc/PID/status, since
// the kernel's own peak is gone once the process exits) and their CPU
// seconds together (user + system, /proc/PID/stat). Linux only: elsewhere
// both stay zero.
type Usage struct {
	PeakRSS []int64 // bytes, one per relay process
	CPU     float64 // seconds, all relay processes
}

// MaxRSS is the largest peak of the processes.
func (u Usage) MaxRSS() int64 {
	var m int64
	for _, r := range u.PeakRSS {
		m = max(m, r)
	}
	return m
}

// String is "peak RSS 41 MiB, 44 MiB; 3.2 CPU s".
func (u Usage) String() string {
	if len(u.PeakRSS) == 0 {
		return "no usage read"
	}
	rss := make([]string, len(u.PeakRSS))
	for i, r := range u.PeakRSS {
		rss[i] = fmt.Sprintf("%.0f MiB", float64(r)/(1<<20))
	}
	return fmt.Sprintf("peak RSS %s; %.1f CPU s", strings.Join(rss, ", "), u.CPU)
}

// sampler follows the resident sets of some processes until stopped.
type sampler struct {
	pids    []int
	mu      sync.Mutex
	peak    []int64
	stop    chan struct{}
	done    chan struct{}
	stopped sync.Once
}

func sampleProcesses(pids []int) *sampler {
	s := &sampler{pids: pids, peak: make([]int64, len(pids)), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) sample() {
	for i, pid := range s.pids {
		if rss, err := residentBytes(pid); err == nil {
			s.mu.Lock()
			s.peak[i] = max(s.peak[i], rss)
			s.mu.Unlock()
		}
	}
}

// halt stops sampling; it may be called more than once (deferred on the
// paths that return an error).
func (s *sampler) halt() {
	s.stopped.Do(func() { close(s.stop) })
	<-s.done
}

// finish stops sampling and reads the CPU the processes used so far; call
// it before they exit.
func (s *sampler) finish() Usage {
	s.sample()
	s.halt()
	var u Usage
	s.mu.Lock()
	u.PeakRSS = append(u.PeakRSS, s.peak...)
	s.mu.Unlock()
	for _, pid := range s.pids {
		if cpu, err := cpuSeconds(pid); err == nil {
			u.CPU += cpu
		}
	}
	return u
}

// residentBytes reads VmRSS from /proc/PID/status.
func residentBytes(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for process %d", pid)
}

// clockTicks is the unit of /proc/PID/stat's CPU times: USER_HZ, 100 on
// every Linux architecture Go runs on (sysconf(_SC_CLK_TCK) without cgo).
const clockTicks = 100

// cpuSeconds reads user + system time from /proc/PID/stat.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// the command name (field 2) may hold spaces: count after its ')'
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	return (ut + st) / clockTicks, nil
}

// progress prints "<phase>: n/total events, r ev/s" every 2 s while a
// phase runs; stop it with the returned function.
func progress(out io.Writer, phase string, total int, done func() int64) func() {
	stop := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				n := done()
				fmt.Fprintf(out, "bench: %s: %d/%d events, %.0f ev/s so far\n", phase, n, total, float64(n)/time.Since(start).Seconds())
			}
		}
	}()
	return func() { close(stop); <-finished }
}
