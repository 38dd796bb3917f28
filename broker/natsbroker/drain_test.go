package natsbroker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/testkit/drainbench"
)

// BenchmarkRelayDrain drains a backlog of events from PostgreSQL through
// relay.Run and the adapter into a JetStream stream (file storage, a
// 2-minute duplicate window, at most 20,000 messages) and reports it
// against raw JetStream PublishMsgAsync of the same subjects and payloads
// with only a Nats-Msg-Id header, every PubAck of a batch awaited, in the
// same run; see package internal/drainbench for what is measured:
//
//	go test -run XXX -bench RelayDrain -benchtime 1x -timeout 30m ./broker/natsbroker/
func BenchmarkRelayDrain(b *testing.B) {
	url := testenv.Require(b, testenv.NATS)
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	suffix := fmt.Sprint(time.Now().UnixNano() % 1_000_000_000)
	subject := "natsdrain_" + suffix
	name := "NATSBROKER_DRAIN_" + suffix
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject + ".>"}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, MaxMsgs: 20_000}); err != nil {
		b.Fatalf("create stream: %v", err)
	}
	defer js.DeleteStream(context.Background(), name) //nolint:errcheck
	br, err := natsbroker.Dial(url, natsbroker.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close(context.Background()) //nolint:errcheck
	drainbench.Run(b, drainbench.Harness{Topic: subject + ".orders", Broker: br, Server: "nats-server", Raw: func(batch []outbox.Message) error {
		futures := make([]jetstream.PubAckFuture, len(batch))
		for j, m := range batch {
			msg := &nats.Msg{Subject: subject + ".raw", Data: m.Payload, Header: nats.Header{jetstream.MsgIDHeader: {outbox.NewEventID()}}}
			f, err := js.PublishMsgAsync(msg)
			if err != nil {
				return err
			}
			futures[j] = f
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			}
		}
		return nil
	}})
}
