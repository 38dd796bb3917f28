//go:build !linux

package drainbench

import "time"

// selfCPU is not measured on this system.
func selfCPU() time.Duration { return 0 }

// procCPU is not measured on this system.
func procCPU(string) map[string]time.Duration { return nil }
