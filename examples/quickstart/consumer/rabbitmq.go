package main

import (
	"context"
	"log"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox/inbox/amqpmsg"
)

// fromRabbitMQ reads the queue points, which `outbox broker setup --broker
// 'amqp://…?exchange=orders' --queue points --topics 'orders.#'` declares
// and binds.
func (c *consumer) fromRabbitMQ(ctx context.Context, url string) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	deliveries, err := ch.ConsumeWithContext(ctx, "points", "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	go func() {
		for d := range deliveries {
			msg, err := amqpmsg.FromDelivery(d) // event id from message-id, the rest from cloudEvents:* headers
			if err != nil {
				log.Printf("not an outbox event: %v", err)
				_ = d.Reject(false)
				continue
			}
			if err := c.handle(ctx, msg); err != nil {
				log.Printf("event %s: %v (not acknowledged: RabbitMQ redelivers it)", msg.EventID, err)
				_ = d.Nack(false, true)
				continue
			}
			_ = d.Ack(false)
		}
	}()
	c.waiting(ctx, "the queue points")
	return nil
}
