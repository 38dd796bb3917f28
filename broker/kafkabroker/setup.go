package kafkabroker

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TopicSetup says what EnsureTopics did.
type TopicSetup struct {
	Created  []string // topics that did not exist and were created, in the order given
	Existing []string // topics that existed already (left as they are)
}

// EnsureTopics makes sure every topic of topics exists, creating the
// missing ones with the given number of partitions and replication factor
// (-1 for each means the cluster's defaults, num.partitions and
// default.replication.factor). Existing topics are left unchanged, whatever
// their partitions. It is idempotent. The Broker itself never creates
// topics (and franz-go does not ask the cluster to auto-create them): how
// many partitions a topic has, which decides how far its keys spread, is
// the operator's choice, made by calling this (or `outbox broker setup`)
// or with any other Kafka tool.
func EnsureTopics(ctx context.Context, cl *kgo.Client, partitions int32, replication int16, topics ...string) (TopicSetup, error) {
	var res TopicSetup
	if len(topics) == 0 {
		return res, errors.New("kafkabroker: EnsureTopics needs at least one topic")
	}
	for _, t := range topics {
		if why := topicProblem(t); why != "" {
			return res, fmt.Errorf("kafkabroker: topic %q: %w: %s", t, ErrInvalidTopic, why)
		}
	}
	if partitions == 0 || partitions < -1 {
		return res, fmt.Errorf("kafkabroker: EnsureTopics: %d partitions; use -1 for the cluster's default or a positive number", partitions)
	}
	if replication == 0 || replication < -1 {
		return res, fmt.Errorf("kafkabroker: EnsureTopics: replication factor %d; use -1 for the cluster's default or a positive number", replication)
	}
	adm := kadm.NewClient(cl)
	resps, err := adm.CreateTopics(ctx, partitions, replication, nil, topics...)
	if err != nil {
		return res, fmt.Errorf("kafkabroker: create topics %q: %w", topics, err)
	}
	seen := map[string]bool{}
	for _, t := range topics {
		if seen[t] {
			continue
		}
		seen[t] = true
		r, ok := resps[t]
		switch {
		case !ok:
			return res, fmt.Errorf("kafkabroker: create topic %q: the cluster did not answer for it", t)
		case r.Err == nil:
			res.Created = append(res.Created, t)
		case errors.Is(r.Err, kerr.TopicAlreadyExists):
			res.Existing = append(res.Existing, t)
		default:
			msg := ""
			if r.ErrMessage != "" {
				msg = " (" + r.ErrMessage + ")"
			}
			return res, fmt.Errorf("kafkabroker: create topic %q: %w%s", t, r.Err, msg)
		}
	}
	return res, nil
}
