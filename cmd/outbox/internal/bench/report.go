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
	Result    *Result      `json:"result,omitempty"`
	// Enqueue holds the enqueue-overhead scenario's rows (bench --enqueue).
	Enqueue []EnqueueRow `json:"enqueue,omitempty"`
}

// ReportConfig is the part of Config a report records; URLs come masked.
type ReportConfig struct {
	DB         string        `json:"db"`
	Broker     string        `json:"broker,omitempty"`
	Events     int           `json:"events,omitempty"`
	Batch      int           `json:"batch,omitempty"`
	Workers    int           `json:"workers,omitempty"`
	Rate       int           `json:"rate,omitempty"`
	Duration   time.Duration `json:"duration_ns,omitempty"`
	Warmup     time.Duration `json:"warmup_ns,omitempty"`
	Payload    int           `json:"payload"`
	Keys       int           `json:"keys,omitempty"`
	Relays     int           `json:"relays,omitempty"`
	RelayArgs  []string      `json:"relay_args,omitempty"`
	Producer   string        `json:"producer,omitempty"`
	Partitions int           `json:"partitions,omitempty"`
	History    int           `json:"history,omitempty"`
	Dead       int           `json:"dead,omitempty"`
	KeepSent   bool          `json:"keep_sent,omitempty"`
	// Writers, Transactions and Rounds are the enqueue scenario's.
	Writers      []int `json:"writers,omitempty"`
	Transactions int   `json:"transactions,omitempty"`
	Rounds       int   `json:"rounds,omitempty"`
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
		Date: start.UTC(), GoVersion: runtime.Version(), LoadStart: loadStart, LoadEnd: LoadAvg(), Result: &r,
		Config: ReportConfig{
			DB: mask(c.DBURL), Broker: mask(c.BrokerURL), Events: c.Events, Batch: c.Batch, Workers: c.Workers,
			Rate: c.Rate, Duration: c.Duration, Warmup: c.Warmup, Payload: c.Payload, Keys: c.Keys,
			Relays: c.Relays, RelayArgs: c.RelayArgs, Producer: c.Producer, Partitions: c.Partitions,
			History: c.History, Dead: c.Dead, KeepSent: c.KeepSent,
		},
	}
	rep.Revision = revision()
	return rep
}

// NewEnqueueReport fills a Report from an enqueue-overhead run.
func NewEnqueueReport(c EnqueueConfig, rows []EnqueueRow, start time.Time, loadStart string, mask func(string) string) Report {
	c = c.WithDefaults()
	return Report{
		Date: start.UTC(), GoVersion: runtime.Version(), Revision: revision(), LoadStart: loadStart, LoadEnd: LoadAvg(),
		Config:  ReportConfig{DB: mask(c.DBURL), Payload: c.Payload, Writers: c.Writers, Transactions: c.Transactions, Rounds: c.Rounds},
		Enqueue: rows,
	}
}

// revision is the VCS revision the binary was built from, or "".
func revision() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return ""
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
