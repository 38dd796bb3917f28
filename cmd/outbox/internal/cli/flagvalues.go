package cli

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Numeric and duration flags are checked when they are set (on the command
// line or from --config), so a value out of range is refused with the
// flag's name instead of silently becoming a default somewhere below.

// intRange is an int flag that must lie in [min, max].
type intRange struct {
	p   *int
	min int
	max int64
}

func (v intRange) String() string {
	if v.p == nil { // flag.PrintDefaults probes a zero value
		return "0"
	}
	return strconv.Itoa(*v.p)
}

func (v intRange) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, strconv.IntSize)
	if err != nil {
		return errors.New("not a whole number")
	}
	if err := inRange(n, int64(v.min), v.max); err != nil {
		return err
	}
	*v.p = int(n)
	return nil
}

// int64Range is intRange for int64 values.
type int64Range struct {
	p        *int64
	min, max int64
}

func (v int64Range) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.FormatInt(*v.p, 10)
}

func (v int64Range) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return errors.New("not a whole number")
	}
	if err := inRange(n, v.min, v.max); err != nil {
		return err
	}
	*v.p = n
	return nil
}

// inRange says why n is outside [lo, hi]; hi == noMax means no upper bound.
func inRange(n, lo, hi int64) error {
	switch {
	case n >= lo && n <= hi:
		return nil
	case hi == noMax:
		return fmt.Errorf("must be at least %d", lo)
	default:
		return fmt.Errorf("must be between %d and %d", lo, hi)
	}
}

// noMax is the upper bound of a flag that has none.
const noMax = math.MaxInt64

// durationMin is a duration flag that must be at least min.
type durationMin struct {
	p   *time.Duration
	min time.Duration
}

func (v durationMin) String() string {
	if v.p == nil {
		return "0s"
	}
	return v.p.String()
}

func (v durationMin) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (say e.g. 500ms, 30s, 5m, 168h)")
	}
	if d == 0 && strings.ContainsAny(s, "123456789") {
		return fmt.Errorf("%s is below a nanosecond and would be 0: give 0, or at least 1ns", s)
	}
	if d < v.min {
		if v.min == 0 {
			return errors.New("must not be negative")
		}
		return fmt.Errorf("must be at least %s", v.min)
	}
	*v.p = d
	return nil
}

// intFlag defines an int flag whose value must lie in [min, max]; use
// noMax for no upper bound.
func (f *flags) intFlag(p *int, name string, def, min int, max int64, usage string) {
	*p = def
	f.Var(intRange{p, min, max}, name, usage+bounds(int64(min), max))
}

// int64Flag is intFlag for an int64 value.
func (f *flags) int64Flag(p *int64, name string, def, min int64, usage string) {
	*p = def
	f.Var(int64Range{p, min, noMax}, name, usage+bounds(min, noMax))
}

// durationFlag defines a duration flag whose value must be at least min.
func (f *flags) durationFlag(p *time.Duration, name string, def, min time.Duration, usage string) {
	*p = def
	f.Var(durationMin{p, min}, name, usage+fmt.Sprintf(" (`duration` ≥ %s)", minString(min)))
}

func bounds(min, max int64) string {
	if max == noMax {
		return fmt.Sprintf(" (`n` ≥ %d)", min)
	}
	return fmt.Sprintf(" (`n` from %d to %d)", min, max)
}

func minString(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return d.String()
}

// byteSize is a size flag: plain bytes or a whole number with a binary
// unit (KiB, MiB, GiB, TiB; B for bytes), at least min.
type byteSize struct {
	p   *int64
	min int64
}

// byteUnits are the units byteSize takes, longest first.
var byteUnits = []struct {
	name  string
	shift uint
}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}, {"B", 0}}

func (v byteSize) String() string {
	if v.p == nil {
		return "0"
	}
	return formatBytes(*v.p)
}

func (v byteSize) Set(s string) error {
	num, shift := strings.TrimSpace(s), uint(0)
	for _, u := range byteUnits {
		if len(num) > len(u.name) && strings.EqualFold(num[len(num)-len(u.name):], u.name) {
			num, shift = strings.TrimSpace(num[:len(num)-len(u.name)]), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return errors.New("not a size: give bytes, or a whole number of KiB, MiB, GiB or TiB (e.g. 64MiB)")
	}
	if n > math.MaxInt64>>shift {
		return errors.New("too large")
	}
	n <<= shift
	if n < v.min {
		return fmt.Errorf("must be at least %d bytes", v.min)
	}
	*v.p = n
	return nil
}

// formatBytes writes n in the largest binary unit that divides it.
func formatBytes(n int64) string {
	for i := len(byteUnits) - 2; i >= 0; i-- {
		if u := byteUnits[i]; n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

// sizeFlag defines a size flag (byteSize) whose value must be at least min.
func (f *flags) sizeFlag(p *int64, name string, def, min int64, usage string) {
	*p = def
	f.Var(byteSize{p, min}, name, usage+fmt.Sprintf(" (`size` ≥ %d bytes: bytes, or KiB, MiB, GiB)", min))
}
