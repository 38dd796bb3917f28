package wire

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/kafkabroker"
	"github.com/outbox-go/outbox/broker/natsbroker"
)

// brokerAdapter is one --broker URL family: its schemes and how to open it.
// open gets the whole raw URL (some drivers take lists) and its parse; its
// errors are scrubbed of the URL's secrets by OpenBroker, and one wrapping
// ErrUsage is a mistake in the URL (exit 2).
type brokerAdapter struct {
	schemes []string
	open    func(ctx context.Context, raw string, u *url.URL) (broker.Broker, error)
}

// brokerForms is what BrokerSchemes says: one example URL per adapter,
// kept in the order of brokerAdapters. Add an adapter to both.
const brokerForms = "nats://host:4222, kafka://host:9092[,host2:9092], amqp://user:pass@host:5672/vhost[?exchange=name], mqtt://[user:pass@]host:1883"

// brokerAdapters are the built-in broker adapters, tried in order.
var brokerAdapters = []brokerAdapter{
	{schemes: []string{"nats", "tls"}, open: openNATS},
	{schemes: []string{"kafka"}, open: openKafka},
	{schemes: []string{"amqp", "amqps"}, open: openAMQP}, // brokers_amqp.go
	{schemes: []string{"mqtt", "mqtts"}, open: openMQTT}, // brokers_mqtt.go
}

// plannedSchemes are schemes of adapters not built in yet: they get "not
// built into this version" rather than "unknown scheme".
var plannedSchemes = []string{"redis", "rediss", "http", "https", "rocketmq"}

func openNATS(_ context.Context, raw string, _ *url.URL) (broker.Broker, error) {
	// nats.go splits the list at commas and reads each URL with net/url.
	for _, one := range strings.Split(raw, ",") {
		if err := checkUserinfo("broker", strings.TrimSpace(one), goUserinfo); err != nil {
			return nil, err
		}
	}
	return natsbroker.Dial(raw, natsbroker.Config{})
}

func openKafka(_ context.Context, raw string, _ *url.URL) (broker.Broker, error) {
	for _, one := range strings.Split(raw, ",") {
		if err := checkUserinfo("broker", strings.TrimSpace(one), goUserinfo); err != nil {
			return nil, err
		}
	}
	if err := kafkabroker.CheckURL(raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return kafkabroker.Dial(raw, kafkabroker.Config{})
}
