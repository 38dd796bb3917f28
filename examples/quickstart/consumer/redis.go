package main

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox/inbox/redismsg"
)

// fromRedis reads the stream orders.paid (the relay adds each event to the
// stream named by its topic) as the consumer group points.
func (c *consumer) fromRedis(ctx context.Context, url string) error {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	const stream, group = "orders.paid", "points"
	// From the stream's start, so events added before the group existed count.
	err = rdb.XGroupCreateMkStream(ctx, stream, group, "0").Err()
	if err != nil && err.Error() != "BUSYGROUP Consumer Group name already exists" {
		return err
	}
	go func() {
		for ctx.Err() == nil {
			res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: group, Consumer: "points-1", Streams: []string{stream, ">"}, Count: 100, Block: time.Second,
			}).Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				if ctx.Err() == nil {
					log.Printf("read %s: %v", stream, err)
					time.Sleep(time.Second)
				}
				continue
			}
			for _, m := range res[0].Messages {
				msg, err := redismsg.FromXMessage(stream, m) // fields data, ce_id, ce_type, key, …
				if err != nil {
					log.Printf("not an outbox event: %v", err)
				} else if err := c.handle(ctx, msg); err != nil {
					// Left pending in the group, for XAUTOCLAIM to hand out again.
					log.Printf("event %s: %v (not acknowledged)", msg.EventID, err)
					continue
				}
				_ = rdb.XAck(ctx, stream, group, m.ID).Err()
			}
		}
	}()
	c.waiting(ctx, "the stream "+stream)
	return nil
}
