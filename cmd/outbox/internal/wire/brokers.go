package wire

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/httpbroker"
	"github.com/outbox-go/outbox/broker/kafkabroker"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/broker/redisbroker"
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
const brokerForms = "nats://host:4222, kafka://host:9092[,host2:9092], " +
	"amqp://user:pass@host:5672/vhost[?exchange=name], mqtt://[user:pass@]host:1883, " +
	"redis://[:pass@]host:6379/0[?maxlen=N&dedup=24h|off] (rediss:// for TLS), " +
	"https://host/path/{topic} (secret: OUTBOX_WEBHOOK_SECRET or ?webhook_secret=whsec_…), " +
	"rocketmq://[accesskey:secretkey@]nameserver:9876[,nameserver2:9876][?group=NAME&namespace=NS]"

// brokerAdapters are the built-in broker adapters, tried in order.
var brokerAdapters = []brokerAdapter{
	{schemes: []string{"nats", "tls"}, open: openNATS},
	{schemes: []string{"kafka"}, open: openKafka},
	{schemes: []string{"redis", "rediss"}, open: openRedis},
	{schemes: []string{"http", "https"}, open: openHTTP},
	{schemes: []string{"amqp", "amqps"}, open: openAMQP}, // brokers_amqp.go
	{schemes: []string{"mqtt", "mqtts"}, open: openMQTT}, // brokers_mqtt.go
	{schemes: []string{"rocketmq"}, open: openRocketMQ},  // brokers_rocketmq.go
}

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

func openRedis(_ context.Context, raw string, _ *url.URL) (broker.Broker, error) {
	// go-redis reads the URL with net/url.
	if err := checkUserinfo("broker", raw, goUserinfo); err != nil {
		return nil, err
	}
	b, err := redisbroker.Dial(raw, redisbroker.Config{})
	if errors.Is(err, redisbroker.ErrInvalidURL) {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return b, err
}

// WebhookSecretEnv names the variable holding the Standard Webhooks secret
// of an http(s) broker whose URL has no webhook_secret= parameter.
const WebhookSecretEnv = "OUTBOX_WEBHOOK_SECRET"

func openHTTP(_ context.Context, raw string, _ *url.URL) (broker.Broker, error) {
	cfg := httpbroker.Config{Secret: os.Getenv(WebhookSecretEnv)}
	b, err := httpbroker.Dial(raw, cfg)
	if err != nil {
		// every error of Dial is in the URL or the secret
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return b, nil
}
