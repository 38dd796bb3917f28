package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Sweep is a drain measured at several values of one setting: the key
// count (keys=1,10,100,…) or the backlog size (events=10000,100000,…).
type Sweep struct {
	Setting string // "keys" or "events"
	Values  []int
}

// ParseSweep reads "keys=1,10,100" or "events=10000,100000".
func ParseSweep(s string) (Sweep, error) {
	name, list, ok := strings.Cut(s, "=")
	if !ok || (name != "keys" && name != "events") || list == "" {
		return Sweep{}, fmt.Errorf("--sweep %q: write keys=1,10,100 or events=10000,100000 (the setting, =, the values separated by commas)", s)
	}
	var sw Sweep
	sw.Setting = name
	for _, v := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return Sweep{}, fmt.Errorf("--sweep %s: %q is not a whole number of at least 1", name, v)
		}
		sw.Values = append(sw.Values, n)
	}
	return sw, nil
}

// Point is one value of a Sweep and the run measured at it.
type Point struct {
	Value  int
	Result Result
}

// RunSweep runs the drain (no latency run) once per value of sw, each on
// fresh tables and a fresh stream as Run does, and prints a table.
func RunSweep(ctx context.Context, c Config, sw Sweep) ([]Point, error) {
	c = c.WithDefaults()
	var points []Point
	for _, v := range sw.Values {
		one := c
		one.DrainOnly = true
		if sw.Setting == "keys" {
			one.Keys = v
		} else {
			one.Events = v
		}
		fmt.Fprintf(c.Out, "bench: sweep %s=%d …\n", sw.Setting, v)
		res, err := Run(ctx, one)
		if err != nil {
			return points, fmt.Errorf("bench: sweep %s=%d: %w", sw.Setting, v, err)
		}
		points = append(points, Point{Value: v, Result: res})
	}
	writeSweepTable(c.Out, sw, points)
	return points, nil
}

func writeSweepTable(w io.Writer, sw Sweep, points []Point) {
	fmt.Fprintf(w, "\n| %s | relay drain (ev/s) | naive relay (ev/s) | drain / naive | raw SQL claim+delete (rows/s) |\n|---|---|---|---|---|\n", sw.Setting)
	for _, p := range points {
		r := p.Result
		fmt.Fprintf(w, "| %d | %.0f | %.0f | %.2f | %.0f |\n", p.Value, r.DrainRate, r.NaiveRate, r.DrainRate/r.NaiveRate, r.RawSQLRate)
	}
}

// SweepChart is the chart of a sweep: the relay's drain and the naive
// relay's of the same runs against the swept setting.
func SweepChart(c Config, sw Sweep, points []Point) Chart {
	c = c.WithDefaults()
	relays := "relay in process"
	if c.Relays > 0 {
		relays = fmt.Sprintf("relay (%d processes)", c.Relays)
	}
	ch := Chart{YLabel: "events/s", LogX: true}
	if sw.Setting == "keys" {
		ch.Title = fmt.Sprintf("Drain of %d events against the number of keys", c.Events)
		ch.XLabel = "distinct keys"
	} else {
		ch.Title = fmt.Sprintf("Drain against the backlog size, %d keys", c.Keys)
		ch.XLabel = "events in the backlog"
	}
	drain, naive := Series{Name: relays}, Series{Name: "naive relay (no order)"}
	for _, p := range points {
		x := float64(p.Value)
		drain.X, drain.Y = append(drain.X, x), append(drain.Y, p.Result.DrainRate)
		naive.X, naive.Y = append(naive.X, x), append(naive.Y, p.Result.NaiveRate)
	}
	ch.Series = []Series{drain, naive}
	return ch
}
