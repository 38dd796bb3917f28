package bench

import (
	"encoding/json"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Report is what --json writes: the run's settings, its figures and the
// machine's state around it.
type Report struct {
	Date      time.Time    `json:"date"`
	GoVersion string       `json:"go_version"`
	Revision  string       `json:"revision,omitempty"`
	LoadStart string       `json:"load_start,omitempty"` // /proc/loadavg's three averages
	LoadEnd   string       `json:"load_end,omitempty"`
	Config    ReportConfig `json:"config"`
	Result    Result       `json:"result"`
}

// ReportConfig is the part of Config a report records; URLs come masked.
type ReportConfig struct {
	DB         string        `json:"db"`
	Broker     string        `json:"broker"`
	Events     int           `json:"events"`
	Batch      int           `json:"batch"`
	Workers    int           `json:"workers"`
	Rate       int           `json:"rate"`
	Duration   time.Duration `json:"duration_ns"`
	Warmup     time.Duration `json:"warmup_ns"`
	Payload    int           `json:"payload"`
	Keys       int           `json:"keys"`
	Relays     int           `json:"relays"`
	RelayArgs  []string      `json:"relay_args,omitempty"`
	Producer   string        `json:"producer"`
	Partitions int           `json:"partitions,omitempty"`
	History    int           `json:"history,omitempty"`
	Dead       int           `json:"dead,omitempty"`
	KeepSent   bool          `json:"keep_sent,omitempty"`
}

// LoadAvg returns /proc/loadavg's 1, 5 and 15 minute averages, or "" where
// there is no /proc.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// NewReport fills a Report from a run; mask hides the URLs' passwords.
func NewReport(c Config, r Result, start time.Time, loadStart string, mask func(string) string) Report {
	c = c.WithDefaults()
	rep := Report{
		Date: start.UTC(), GoVersion: runtime.Version(), LoadStart: loadStart, LoadEnd: LoadAvg(), Result: r,
		Config: ReportConfig{
			DB: mask(c.DBURL), Broker: mask(c.BrokerURL), Events: c.Events, Batch: c.Batch, Workers: c.Workers,
			Rate: c.Rate, Duration: c.Duration, Warmup: c.Warmup, Payload: c.Payload, Keys: c.Keys,
			Relays: c.Relays, RelayArgs: c.RelayArgs, Producer: c.Producer, Partitions: c.Partitions,
			History: c.History, Dead: c.Dead, KeepSent: c.KeepSent,
		},
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rep.Revision = s.Value
			}
		}
	}
	return rep
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
