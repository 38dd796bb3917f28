package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/kafkabroker"
	"github.com/outbox-go/outbox/internal/redact"
)

// DefaultPartitions is the partitions of a Kafka run's topics.
const DefaultPartitions = 16

// KfakeLabel is how every report line with a figure through kfake names
// the broker: its CPU is the bench process's, so the figure is not one of
// a Kafka cluster on another machine.
const KfakeLabel = "Kafka (kfake, in-process)"

// kafkaDestination is the run's topics on a Kafka cluster, or on an
// in-process kfake cluster that the run starts and stops.
type kafkaDestination struct {
	raw     string // the URL the adapter dials: kafka://…
	given   string // c.BrokerURL, for messages
	label   string // "Kafka" or KfakeLabel
	cluster *kfake.Cluster
	ctl     *kafkabroker.Broker // its client creates and deletes the topics, counts, produces the floor
	adm     *kadm.Client
	prefix  string
	created []string
}

func openKafka(ctx context.Context, c Config, suffix string) (d *kafkaDestination, err error) {
	d = &kafkaDestination{raw: c.BrokerURL, given: c.BrokerURL, label: "Kafka", prefix: "outbox-bench-" + suffix}
	defer func() {
		if err != nil {
			d.close()
			d = nil
		}
	}()
	if brokerKind(c.BrokerURL) == "kfake" {
		d.label = KfakeLabel
		d.cluster, err = kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return d, fmt.Errorf("bench: start kfake: %w", err)
		}
		d.raw = "kafka://" + strings.Join(d.cluster.ListenAddrs(), ",")
	}
	d.ctl, err = kafkabroker.Dial(d.raw, kafkabroker.Config{ClientID: "outbox-bench"})
	if err != nil {
		return d, redact.Error(fmt.Errorf("bench: connect to Kafka at %s: %w", redact.URL(d.given), err), d.given)
	}
	d.adm = kadm.NewClient(d.ctl.Client())
	for _, t := range []struct {
		phase      string
		partitions int
	}{{"orders", c.Partitions}, {"latency", c.Partitions}, {"floor", 1}} {
		name := d.topic(t.phase)
		setup, err := kafkabroker.EnsureTopics(ctx, d.ctl.Client(), int32(t.partitions), -1, name)
		if err != nil {
			return d, redact.Error(fmt.Errorf("bench: create topic on %s: %w", redact.URL(d.given), err), d.given)
		}
		if len(setup.Existing) > 0 {
			return d, fmt.Errorf("bench: topic %s exists already on %s; the run needs fresh topics (try again)", name, redact.URL(d.given))
		}
		d.created = append(d.created, name)
	}
	if err := d.waitLeaders(ctx, map[string]int{d.topic("orders"): c.Partitions, d.topic("latency"): c.Partitions, d.topic("floor"): 1}); err != nil {
		return d, err
	}
	return d, nil
}

// waitLeaders waits until the cluster's metadata shows every partition of
// the new topics with a leader: a cluster of several brokers learns of a
// topic some milliseconds after CreateTopics answered, and the adapter
// takes a topic unknown after one metadata retry as missing.
func (d *kafkaDestination) waitLeaders(ctx context.Context, want map[string]int) error {
	names := make([]string, 0, len(want))
	for t := range want {
		names = append(names, t)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		td, err := d.adm.ListTopics(ctx, names...)
		ready := err == nil
		for t, n := range want {
			ps := td[t].Partitions
			ready = ready && td[t].Err == nil && len(ps) == n
			for _, p := range ps {
				ready = ready && p.Err == nil && p.Leader >= 0
			}
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if err == nil {
				err = errors.New("not every partition has a leader")
			}
			return redact.Error(fmt.Errorf("bench: the new topics %s on %s are not ready after 30s: %w", strings.Join(names, ", "), redact.URL(d.given), err), d.given)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *kafkaDestination) relayURL() string          { return d.raw }
func (d *kafkaDestination) topic(phase string) string { return d.prefix + "-" + phase }

func (d *kafkaDestination) dial() (broker.Broker, error) {
	b, err := kafkabroker.Dial(d.raw, kafkabroker.Config{})
	if err != nil {
		return nil, redact.Error(err, d.given)
	}
	return b, nil
}

// stored sums the end offsets of the orders topic's partitions: without
// transactions every record takes one offset. Unlike JetStream, which drops
// a redelivered event id within its duplicate window, Kafka stores a
// relay's redelivery again; drainByProcesses checks the table after.
func (d *kafkaDestination) stored(ctx context.Context) (uint64, error) {
	offs, err := d.adm.ListEndOffsets(ctx, d.topic("orders"))
	if err != nil {
		return 0, err
	}
	var n int64
	var firstErr error
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err != nil && firstErr == nil {
			firstErr = fmt.Errorf("bench: end offset of %s[%d]: %w", o.Topic, o.Partition, o.Err)
		}
		n += max(o.Offset, 0)
	})
	return uint64(n), firstErr
}

// receive consumes the latency topic from its start, without a group, and
// takes each record's event id from its ce_id header (the CloudEvents
// binding the adapter writes).
func (d *kafkaDestination) receive(ctx context.Context, got func(string, time.Time)) (func(), error) {
	opts := append(append([]kgo.Opt(nil), d.ctl.Client().Opts()...),
		kgo.ClientID("outbox-bench-consumer"),
		kgo.ConsumeTopics(d.topic("latency")),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(time.Second),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, redact.Error(fmt.Errorf("bench: Kafka consumer: %w", err), d.given)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for cctx.Err() == nil {
			fs := cl.PollFetches(cctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				for _, h := range r.Headers {
					if h.Key == "ce_id" {
						got(string(h.Value), now)
						break
					}
				}
			})
		}
	}()
	return func() {
		cancel()
		<-done
		cl.Close()
	}, nil
}

func (d *kafkaDestination) publishOne(ctx context.Context) error {
	return d.ctl.Client().ProduceSync(ctx, &kgo.Record{Topic: d.topic("floor"), Value: []byte("x")}).FirstErr()
}

func (d *kafkaDestination) close() {
	if d.adm != nil && len(d.created) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _ = d.adm.DeleteTopics(ctx, d.created...)
		cancel()
	}
	if d.ctl != nil {
		_ = d.ctl.Close(context.Background())
	}
	if d.cluster != nil {
		d.cluster.Close()
	}
}
