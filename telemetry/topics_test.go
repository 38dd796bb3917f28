package telemetry_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/telemetry"
)

// 10,000 distinct topics delivered (and some failing) make at most
// MaxTopics + 1 series per metric: the first MaxTopics topics, then
// "other", whose events the overflow counter counts (issue 28: every
// topic became a series, 11,109 of them).
func TestTopicLabelsAreCapped(t *testing.T) {
	const maxTopics, topics = 10, 10_000
	m := telemetry.NewMetrics(telemetry.MetricsConfig{MaxTopics: maxTopics})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	ctx := context.Background()
	for i := range topics {
		topic := "orders." + strconv.Itoa(i)
		evs := []outbox.Event{{Message: outbox.Message{Topic: topic}}, {Message: outbox.Message{Topic: topic}}}
		res := []broker.Result{{}, {Err: errors.New("nope")}}
		m.OnPublishEnd(ctx, relay.PublishInfo{Events: evs, Results: res})
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	value := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			series[mf.GetName()]++
			key := mf.GetName()
			for _, l := range mt.GetLabel() {
				if l.GetName() == "topic" {
					key += "/" + l.GetValue()
				}
			}
			value[key] += mt.GetCounter().GetValue()
		}
	}
	for _, name := range []string{"outbox_events_published_total", "outbox_publish_failures_total"} {
		if n := series[name]; n > maxTopics+1 {
			t.Errorf("%s has %d series after %d topics; want at most %d", name, n, topics, maxTopics+1)
		}
	}
	if got, want := value["outbox_metrics_topics_overflow_total"], float64(2*(topics-maxTopics)); got != want {
		t.Errorf("outbox_metrics_topics_overflow_total = %v; want %v", got, want)
	}
	if got := value["outbox_events_published_total/"+telemetry.OtherTopic]; got != topics-maxTopics {
		t.Errorf(`published{topic="other"} = %v; want %d`, got, topics-maxTopics)
	}
	if got := value["outbox_events_published_total/orders.0"]; got != 1 {
		t.Errorf(`published{topic="orders.0"} = %v; want 1`, got)
	}
}
