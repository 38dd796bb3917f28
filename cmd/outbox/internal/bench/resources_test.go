package bench

import (
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuilder is a strings.Builder safe for the progress goroutine.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestProgressPrintsEveryTwoSeconds(t *testing.T) {
	var out lockedBuilder
	stop := progress(&out, "drain by 2 relay processes", 100, func() int64 { return 50 })
	time.Sleep(2200 * time.Millisecond)
	stop()
	if got := out.String(); !strings.HasPrefix(got, "bench: drain by 2 relay processes: 50/100 events, ") || strings.Count(got, "\n") != 1 {
		t.Fatalf("progress printed %q; want one line after 2 s", got)
	}
}

func TestUsageOfThisProcess(t *testing.T) {
	s := sampleProcesses([]int{os.Getpid()})
	busy := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(busy) { // some CPU to count
	}
	u := s.finish()
	if len(u.PeakRSS) != 1 || u.PeakRSS[0] < 1<<20 || u.CPU <= 0 {
		t.Fatalf("usage of this process: %+v", u)
	}
	if !strings.HasPrefix(u.String(), "peak RSS ") {
		t.Fatalf("String() = %q", u.String())
	}
}
