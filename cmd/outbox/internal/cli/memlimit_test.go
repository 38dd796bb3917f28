package cli

import (
	"runtime/debug"
	"testing"
)

// The relay's soft memory limit follows its byte budget, never below
// minMemoryLimit, and GOMEMLIMIT wins.
func TestLimitMemoryFollowsTheBudget(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	t.Setenv("GOMEMLIMIT", "")
	for budget, want := range map[int64]int64{64 << 20: 96 << 20, 1 << 30: 1<<30 + 32<<20, 1 << 20: 64 << 20} {
		limitMemory(budget)
		if got := debug.SetMemoryLimit(-1); got != want {
			t.Errorf("budget %d: memory limit %d, want %d", budget, got, want)
		}
	}
	debug.SetMemoryLimit(12345 << 20)
	t.Setenv("GOMEMLIMIT", "12345MiB")
	limitMemory(64 << 20)
	if got := debug.SetMemoryLimit(-1); got != 12345<<20 {
		t.Errorf("with GOMEMLIMIT set the limit became %d", got)
	}
}
