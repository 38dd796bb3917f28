package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/kafkabroker"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/broker/rocketmqbroker"
	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
)

const brokerUsage = `broker setup --broker nats://host:4222 --stream NAME --subjects 'orders,orders.>'
       outbox broker setup --broker kafka://host:9092 --topics 'orders,payments' [--partitions N] [--replication N]
       outbox broker setup --broker amqp://user:pass@host:5672/vhost[?exchange=name] --queue NAME [--topics 'orders,invoices']
       outbox broker setup --broker rocketmq://nameserver:9876 --topics 'orders,payments'

NATS: creates the JetStream stream NAME capturing the subjects
(comma-separated, wildcards allowed), or adds the subjects it lacks to an
existing stream NAME. Kafka: creates the topics that do not exist, with N
partitions and replication factor N (-1, the default: the cluster's
num.partitions and default.replication.factor); existing topics are left
as they are. Idempotent. An event whose topic no stream captures, or whose
Kafka topic does not exist, goes DEAD.

AMQP: declares the URL's exchange when it does not exist (durable, kind
topic, so routing keys may use RabbitMQ's wildcards: orders.#), declares
the durable queue NAME and binds it to the exchange for each topic. On the
default exchange (no exchange= in the URL) a queue receives the topic
equal to its name, so --topics may be left out. An event no queue receives
is returned by RabbitMQ, retried, and goes DEAD after the relay's max
attempts. Idempotent.

RocketMQ: topics are created with RocketMQ's admin tool, not by outbox;
prints the mqadmin commands that create the --topics (nothing is changed).
An event whose topic does not exist goes DEAD.`

// runBroker is `outbox broker setup`: what the relay's broker needs before
// the first event, so that a newcomer's first events are stored, not DEAD.
func runBroker(ctx context.Context, e env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(e.stdout, "Usage: outbox %s\n", brokerUsage)
		if len(args) == 0 {
			return fmt.Errorf("%w: say setup", wire.ErrUsage)
		}
		return nil
	}
	if args[0] != "setup" {
		return fmt.Errorf("%w: unknown broker command %q: say setup", wire.ErrUsage, args[0])
	}
	f := newBareFlags(e, "broker setup", brokerUsage)
	brokerURL := f.String("broker", os.Getenv("OUTBOX_BROKER"), "broker URL (or OUTBOX_BROKER): "+wire.BrokerSchemes+"; "+secretsHint("OUTBOX_BROKER"))
	stream := f.String("stream", "", "JetStream stream name, e.g. ORDERS")
	subjects := f.String("subjects", "", "comma-separated subjects the stream captures, e.g. 'orders,orders.>'")
	topics := f.String("topics", "", "Kafka: comma-separated topics to create, e.g. 'orders,payments'; AMQP: topics (routing keys) to bind the queue to on the URL's exchange")
	partitions := f.Int("partitions", -1, "Kafka: partitions of each new topic (-1: the cluster's default)")
	replication := f.Int("replication", -1, "Kafka: replication factor of each new topic (-1: the cluster's default)")
	queue := f.String("queue", "", "AMQP: the queue to declare, e.g. orders")
	if err := f.parse(e, args[1:]); err != nil {
		return err
	}
	if len(f.posArgs()) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", wire.ErrUsage, f.posArgs()[0])
	}
	if err := checkBrokerURL(*brokerURL, true); err != nil {
		return err
	}
	if scheme, _, _ := strings.Cut(*brokerURL, ":"); strings.EqualFold(scheme, "kafka") {
		return setupKafka(ctx, e, *brokerURL, *topics, *partitions, *replication)
	}
	if scheme, _, _ := strings.Cut(*brokerURL, ":"); strings.EqualFold(scheme, "rocketmq") {
		return setupRocketMQ(e, *brokerURL, *topics)
	}
	if isAMQP(*brokerURL) {
		return setupAMQP(ctx, e, *brokerURL, *queue, *topics, *stream != "" || *subjects != "") // broker_amqp.go
	}
	if why := nothingToSetUp(*brokerURL); why != "" {
		fmt.Fprintln(e.stdout, "outbox broker setup: nothing to set up:", why)
		return nil
	}
	if *stream == "" {
		return fmt.Errorf("%w: --stream is required: the JetStream stream's name, e.g. --stream ORDERS", wire.ErrUsage)
	}
	if strings.ContainsAny(*stream, ".*> \t\r\n") {
		return fmt.Errorf("%w: --stream %q: a stream name has no dots, wildcards or white space", wire.ErrUsage, *stream)
	}
	var subj []string
	for _, s := range strings.Split(*subjects, ",") {
		if s = strings.TrimSpace(s); s != "" {
			subj = append(subj, s)
		}
	}
	if len(subj) == 0 {
		return fmt.Errorf("%w: --subjects is required: the topics the relay publishes to, e.g. --subjects 'orders,orders.>'", wire.ErrUsage)
	}
	for _, s := range subj {
		if !validSubject(s) {
			return fmt.Errorf("%w: --subjects: %q is not a NATS subject: tokens separated by dots, no white space, * for one token, > for the rest at the end", wire.ErrUsage, s)
		}
	}
	bctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	br, err := wire.OpenBroker(bctx, *brokerURL)
	if err != nil {
		return err
	}
	defer func() { _ = br.Close(context.Background()) }()
	nb, ok := br.(*natsbroker.Broker)
	if !ok {
		return fmt.Errorf("%w: broker setup knows NATS JetStream only", wire.ErrUsage)
	}
	res, err := natsbroker.EnsureStream(bctx, nb.Conn(), *stream, subj)
	if err != nil {
		return err
	}
	where := wire.Mask(*brokerURL)
	switch {
	case res.Created:
		fmt.Fprintf(e.stdout, "outbox broker: created stream %s on %s capturing %s\n", *stream, where, strings.Join(subj, ", "))
	case len(res.Added) > 0:
		fmt.Fprintf(e.stdout, "outbox broker: stream %s on %s now also captures %s\n", *stream, where, strings.Join(res.Added, ", "))
	default:
		fmt.Fprintf(e.stdout, "outbox broker: stream %s on %s already captures %s\n", *stream, where, strings.Join(subj, ", "))
	}
	return nil
}

// setupKafka is `outbox broker setup` for a kafka:// broker: the topics.
func setupKafka(ctx context.Context, e env, brokerURL, topics string, partitions, replication int) error {
	var names []string
	for _, t := range strings.Split(topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			names = append(names, t)
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("%w: --topics is required for Kafka: the topics the relay publishes to, e.g. --topics 'orders,payments'", wire.ErrUsage)
	}
	if partitions == 0 || partitions < -1 || partitions > 1<<20 {
		return fmt.Errorf("%w: --partitions %d: use -1 for the cluster's default or a positive number", wire.ErrUsage, partitions)
	}
	if replication == 0 || replication < -1 || replication > 1<<14 {
		return fmt.Errorf("%w: --replication %d: use -1 for the cluster's default or a positive number", wire.ErrUsage, replication)
	}
	bctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	br, err := wire.OpenBroker(bctx, brokerURL)
	if err != nil {
		return err
	}
	defer func() { _ = br.Close(context.Background()) }()
	kb, ok := br.(*kafkabroker.Broker)
	if !ok {
		return fmt.Errorf("%w: --topics applies to a kafka:// broker", wire.ErrUsage)
	}
	res, err := kafkabroker.EnsureTopics(bctx, kb.Client(), int32(partitions), int16(replication), names...)
	if err != nil {
		return wire.ScrubError(err, brokerURL)
	}
	where := wire.Mask(brokerURL)
	if len(res.Created) > 0 {
		fmt.Fprintf(e.stdout, "outbox broker: created topics %s on %s\n", strings.Join(res.Created, ", "), where)
	}
	if len(res.Existing) > 0 {
		fmt.Fprintf(e.stdout, "outbox broker: topics %s on %s exist already (left as they are)\n", strings.Join(res.Existing, ", "), where)
	}
	return nil
}

// setupRocketMQ is `outbox broker setup` for a rocketmq:// broker. The
// remoting protocol can create a topic only on a broker named by its
// address, with the cluster's queue counts and permissions: that is the
// operator's call, made with RocketMQ's own admin tool. So it prints the
// commands, one per topic, and changes nothing.
func setupRocketMQ(e env, brokerURL, topics string) error {
	hosts, err := wire.RocketMQNameServers(brokerURL)
	if err != nil {
		return wire.ScrubError(err, brokerURL)
	}
	var names []string
	for _, t := range strings.Split(topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			names = append(names, t)
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("%w: --topics is required for RocketMQ: the topics the relay publishes to, e.g. --topics 'orders,payments'", wire.ErrUsage)
	}
	// The adapter's own rule for topic names, so that what is printed is
	// a topic the relay can publish to (and safe to paste into a shell).
	check, err := rocketmqbroker.New(unusedSender{}, rocketmqbroker.Config{})
	if err != nil {
		return err
	}
	for _, t := range names {
		if err := check.Check(outbox.Message{Topic: t, Type: "check"}); err != nil {
			return fmt.Errorf("%w: --topics: %q: %w", wire.ErrUsage, t, err)
		}
	}
	fmt.Fprintln(e.stdout, "outbox broker setup: RocketMQ topics are created with its admin tool, not by outbox; nothing was changed.")
	fmt.Fprintln(e.stdout, "Create each topic on the cluster (its name: mqadmin clusterList -n ADDR; DefaultCluster unless configured):")
	for _, t := range names {
		fmt.Fprintf(e.stdout, "  mqadmin updateTopic -n '%s' -c DefaultCluster -t %s\n", strings.Join(hosts, ";"), t)
	}
	return nil
}

// unusedSender lets setupRocketMQ build a Broker for its Check alone.
type unusedSender struct{}

func (unusedSender) SendSync(context.Context, ...*primitive.Message) (*primitive.SendResult, error) {
	return nil, errors.New("outbox broker setup sends nothing")
}

// validSubject reports whether s is a NATS subject a stream may capture:
// non-empty tokens separated by dots, no white space, '*' only as a whole
// token and '>' only as the whole last token.
func validSubject(s string) bool {
	toks := strings.Split(s, ".")
	for i, t := range toks {
		switch {
		case t == "", strings.ContainsAny(t, " \t\r\n"):
			return false
		case t == ">":
			if i != len(toks)-1 {
				return false
			}
		case strings.ContainsAny(t, "*>") && t != "*":
			return false
		}
	}
	return true
}

// checkBrokerURL refuses, before anything is dialled, a --broker that would
// silently mean something else: empty (when required), or a nats:// URL
// without a host, which the NATS client would take as localhost.
func checkBrokerURL(raw string, required bool) error {
	if raw == "" {
		if !required {
			return nil
		}
		return wire.WithHint(fmt.Errorf("%w: no broker given: pass --broker URL or set OUTBOX_BROKER", wire.ErrUsage), " ("+wire.BrokerSchemes+")")
	}
	scheme, _, _ := strings.Cut(raw, ":")
	switch strings.ToLower(scheme) {
	case "nats", "tls", "amqp", "amqps", "mqtt", "mqtts":
		// checked below; the adapter refuses its own bad options when opened
	case "kafka":
		// checked without connecting; Dial reads the same URL
		if err := kafkabroker.CheckURL(raw); err != nil {
			return fmt.Errorf("%w: --broker: %w", wire.ErrUsage, err)
		}
		return nil
	case "rocketmq":
		_, err := wire.RocketMQNameServers(raw)
		return wire.ScrubError(err, raw)
	default:
		// A scheme not listed above: OpenBroker tries it now, so that a
		// planned or unknown scheme is refused (a usage error naming the
		// schemes built in) before the database is opened.
		br, err := wire.OpenBroker(context.Background(), raw)
		if err == nil {
			_ = br.Close(context.Background())
		}
		return err
	}
	for _, part := range strings.Split(raw, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.Scheme == "" {
			// Not echoed: an unparsable URL cannot be masked reliably.
			return wire.WithHint(fmt.Errorf("%w: --broker is not a URL (%d characters given); use", wire.ErrUsage, len(raw)), " "+wire.BrokerSchemes)
		}
		if u.Hostname() == "" {
			return fmt.Errorf("%w: --broker %s names no host; say which server, e.g. %s://127.0.0.1:%s", wire.ErrUsage, wire.Mask(part), u.Scheme, defaultPort(u.Scheme))
		}
	}
	return nil
}

// natsOnly refuses, for a command that runs on NATS only, a --broker of
// another adapter.
func natsOnly(command, raw string) error {
	if raw == "" {
		return nil
	}
	scheme, _, _ := strings.Cut(raw, ":")
	switch strings.ToLower(scheme) {
	case "nats", "tls":
		return nil
	}
	return fmt.Errorf("%w: %s runs on NATS JetStream only: --broker nats://host:4222 (or none for an embedded server), not %s", wire.ErrUsage, command, wire.Mask(raw))
}

// nothingToSetUp says why a broker needs nothing created before the first
// event, or "" when it does (NATS: a stream).
func nothingToSetUp(raw string) string {
	scheme, _, _ := strings.Cut(raw, ":")
	switch strings.ToLower(scheme) {
	case "redis", "rediss":
		return "Redis creates each stream at its first XADD"
	case "http", "https":
		return "a webhook endpoint is the receiver's to run"
	}
	return ""
}
