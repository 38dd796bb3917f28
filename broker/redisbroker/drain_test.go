//go:build unix

package redisbroker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/redisbroker"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/testkit/drainbench"
)

// BenchmarkRelayDrain drains a backlog of events from PostgreSQL through
// relay.Run and the adapter into a Redis stream (MAXLEN ~ 20,000) and
// reports it against a raw go-redis pipeline of XADDs of the same entries
// the adapter writes (payload, CloudEvents fields, key; MAXLEN ~ 20,000),
// every reply read, in the same run; see package internal/drainbench for
// what is measured. The sub-benchmarks are the adapter with its dedup (the
// default) and with dedup=off:
//
//	go test -run XXX -bench RelayDrain -benchtime 1x -timeout 30m ./broker/redisbroker/
func BenchmarkRelayDrain(b *testing.B) {
	url := testenv.Require(b, testenv.Redis)
	opt, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	for _, c := range []struct {
		name string
		cfg  redisbroker.Config
	}{
		{"dedup", redisbroker.Config{MaxLen: 20_000, DedupWindow: 10 * time.Minute}},
		{"nodedup", redisbroker.Config{MaxLen: 20_000, NoDedup: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			stream := fmt.Sprint("rb_drain_", time.Now().UnixNano())
			defer dropStream(rdb, stream)
			br, err := redisbroker.Dial(url, c.cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close(ctx) //nolint:errcheck
			now := time.Now().UTC().Format(time.RFC3339Nano)
			drainbench.Run(b, drainbench.Harness{Topic: stream, Broker: br, Server: "redis-server", Raw: func(batch []outbox.Message) error {
				pipe := rdb.Pipeline()
				for _, m := range batch {
					pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream + "_raw", MaxLen: 20_000, Approx: true, Values: []any{
						"data", m.Payload, "ce_id", outbox.NewEventID(), "ce_source", "outbox", "ce_specversion", "1.0", "ce_type", m.Type,
						"ce_time", now, "content_type", "application/json", "key", m.Key, "ce_schemaversion", "1"}})
				}
				_, err := pipe.Exec(ctx)
				return err
			}})
		})
	}
}

// dropStream deletes stream, its raw twin and the dedup hashes of stream.
func dropStream(rdb *redis.Client, stream string) {
	ctx := context.Background()
	rdb.Del(ctx, stream, stream+"_raw")
	iter := rdb.Scan(ctx, 0, redisbroker.DefaultDedupPrefix+"{"+stream+"}:*", 10000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) > 0 {
		rdb.Del(ctx, keys...)
	}
}
