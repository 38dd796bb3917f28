package main

import (
	"context"
	"log"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox/inbox/natsmsg"
)

// fromNATS reads orders.paid from the JetStream stream ORDERS as the
// durable consumer points.
func (c *consumer) fromNATS(ctx context.Context, url string) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// The stream stores what the relay publishes; `outbox broker setup
	// --broker nats://… --stream ORDERS --subjects 'orders.>'` does the same.
	stream, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	if err != nil {
		return err
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "points", FilterSubject: "orders.paid", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		return err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		msg, err := natsmsg.FromJetStream(m) // event id, type, key and version from the headers
		if err != nil {
			log.Printf("not an outbox event: %v", err)
			_ = m.Term()
			return
		}
		if err := c.handle(ctx, msg); err != nil {
			log.Printf("event %s: %v (not acknowledged: NATS redelivers it)", msg.EventID, err)
			_ = m.Nak()
			return
		}
		_ = m.Ack()
	})
	if err != nil {
		return err
	}
	defer cc.Stop()
	c.waiting(ctx, url)
	return nil
}
