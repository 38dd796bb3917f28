package drainbench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of /proc/PID/stat's times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// selfCPU is the user and system CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the user and system CPU time used so far by each process
// whose command name is comm, by pid.
func procCPU(comm string) map[string]time.Duration {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	out := map[string]time.Duration{}
	for _, d := range dirs {
		name, err := os.ReadFile(d + "/comm")
		if err != nil || strings.TrimSpace(string(name)) != comm {
			continue
		}
		stat, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		// the fields after the command (which may hold spaces) in parentheses
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		out[filepath.Base(d)] = time.Duration(utime+stime) * clockTick
	}
	return out
}
