package telemetry_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/telemetry"
)

// futureMetrics are metrics the rules and the dashboard use before this
// package exports them, each with who brings it. Such a rule or panel is
// silent (or empty) until then; the test says so in its log.
var futureMetrics = map[string]string{
	"outbox_shards_held": "engine v2's shard ownership (one gauge per relay: the shards it holds)",
}

// exportedMetrics returns every series name a relay's /metrics can carry:
// the descriptors of Metrics and State, and the _bucket, _sum and _count
// series of the histograms among them.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	m := telemetry.NewMetrics(telemetry.MetricsConfig{})
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		m.Describe(ch)
		telemetry.NewState(nil, nil).Describe(ch)
		close(ch)
	}()
	fq := regexp.MustCompile(`fqName: "([a-z_:]+)"`)
	out := map[string]bool{}
	for d := range ch {
		n := fq.FindStringSubmatch(d.String())
		if n == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		out[n[1]] = true
	}
	// one observation each, so that Gather shows the histograms' types
	ev := []outbox.Event{{Message: outbox.Message{Topic: "t"}, CreatedAt: time.Now()}}
	m.OnClaim(context.Background(), relay.ClaimInfo{Events: ev})
	m.OnPublishEnd(context.Background(), relay.PublishInfo{Events: ev, Results: []broker.Result{{}}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	histograms := 0
	for _, mf := range mfs {
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			histograms++
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[mf.GetName()+s] = true
			}
		}
	}
	if len(out) < 15 || histograms < 3 {
		t.Fatalf("only %d metric names and %d histograms found: %v", len(out), histograms, out)
	}
	return out
}

// metricNames returns the outbox_ names that text mentions.
func metricNames(text string) []string {
	names := regexp.MustCompile(`\boutbox_[a-z_]+\b`).FindAllString(text, -1)
	sort.Strings(names)
	return slices.Compact(names)
}

func checkMetricsExported(t *testing.T, file string, names []string) {
	t.Helper()
	exported := exportedMetrics(t)
	if len(names) == 0 {
		t.Fatalf("%s names no outbox_ metric", file)
	}
	for _, n := range names {
		switch {
		case exported[n]:
		case futureMetrics[n] != "":
			t.Logf("%s uses %s, not exported yet: %s", file, n, futureMetrics[n])
		default:
			t.Errorf("%s uses %s, which the relay does not export", file, n)
		}
	}
}

// Every metric the alert rules name (in expressions and in the advice of
// their annotations) is one the relay exports.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("alerts/outbox-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	names := metricNames(string(raw))
	for _, want := range []string{"outbox_oldest_pending_age_seconds", "outbox_pending_events", "outbox_events_settled_total", "outbox_shards_held", "outbox_ready"} {
		if !slices.Contains(names, want) {
			t.Errorf("no rule uses %s", want)
		}
	}
	checkMetricsExported(t, "alerts/outbox-rules.yml", names)
}

// promtool (Debian's prometheus package; .ci/run installs it) accepts the
// rules and their unit tests pass: each alert fires when it should and
// stays quiet otherwise.
func TestAlertRulesPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		msg := "promtool not found: apt-get install -y prometheus (its package ships promtool)"
		if testenv.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	for _, args := range [][]string{{"check", "rules", "outbox-rules.yml"}, {"test", "rules", "outbox-rules.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "alerts"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// The Grafana dashboard parses, its panels are complete, and every metric
// its queries name is one the relay exports.
func TestGrafanaDashboardUsesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("grafana/outbox.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			GridPos struct {
				W, H int
			} `json:"gridPos"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("grafana/outbox.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("dashboard without title, uid or panels: %q %q %d", dash.Title, dash.UID, len(dash.Panels))
	}
	ids := map[int]bool{}
	var exprs []string
	for _, p := range dash.Panels {
		if p.Title == "" || p.Type == "" || len(p.Targets) == 0 || p.GridPos.W == 0 || p.GridPos.H == 0 || ids[p.ID] {
			t.Errorf("panel %d %q (%s): needs a unique id, a title, a type, a size and queries", p.ID, p.Title, p.Type)
		}
		ids[p.ID] = true
		for _, q := range p.Targets {
			if q.Expr == "" || q.RefID == "" {
				t.Errorf("panel %q has a query without expr or refId", p.Title)
			}
			exprs = append(exprs, q.Expr)
		}
	}
	names := metricNames(strings.Join(exprs, "\n"))
	for _, want := range []string{"outbox_pending_events", "outbox_oldest_pending_age_seconds", "outbox_dead_events", "outbox_events_published_total", "outbox_delivery_latency_seconds_bucket"} {
		if !slices.Contains(names, want) {
			t.Errorf("no panel shows %s", want)
		}
	}
	checkMetricsExported(t, "grafana/outbox.json", names)
}
