package cli

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	amqp "github.com/rabbitmq/amqp091-go"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/testkit/teststores"
)

// broker setup on RabbitMQ declares the queue (idempotently), bound to the
// URL's exchange for the topics; URL and flag mistakes are usage errors.
func TestBrokerSetupAMQP(t *testing.T) {
	url := testenv.Require(t, testenv.RabbitMQ)
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	q := teststores.UniqueTable("cli_setup_q_")
	ex := teststores.UniqueTable("cli_setup_ex_")
	if err := ch.ExchangeDeclare(ex, "topic", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(q, false, false, false)
		_, _ = ch.QueueDelete(q+"_2", false, false, false)
		_ = ch.ExchangeDelete(ex, false, false)
	})
	for range 2 {
		code, out, stderr := runCLI("broker", "setup", "--broker", url, "--queue", q)
		if code != exitOK || !strings.Contains(out, "queue "+q+" on amqp://guest:xxxxx@127.0.0.1:5672/ is declared; the default exchange routes topic "+q) {
			t.Fatalf("setup on the default exchange: exit %d %q %q", code, out, stderr)
		}
	}
	code, out, stderr := runCLI("broker", "setup", "--broker", url+"?exchange="+ex, "--queue", q+"_2", "--topics", "orders.*, invoices")
	if code != exitOK || !strings.Contains(out, "bound to exchange "+ex+" for orders.*, invoices") {
		t.Fatalf("setup with an exchange: exit %d %q %q", code, out, stderr)
	}
	if _, err := ch.QueueDeclarePassive(q+"_2", true, false, false, false, nil); err != nil {
		t.Fatalf("queue not declared: %v", err)
	}
	// An exchange that does not exist yet is declared (a topic exchange),
	// so the README's one command is enough before `outbox relay`.
	newEx := teststores.UniqueTable("cli_setup_newex_")
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(q+"_3", false, false, false)
		_ = ch.ExchangeDelete(newEx, false, false)
	})
	for range 2 {
		code, out, stderr = runCLI("broker", "setup", "--broker", url+"?exchange="+newEx, "--queue", q+"_3", "--topics", "orders.#")
		if code != exitOK || !strings.Contains(out, "bound to exchange "+newEx+" for orders.#") {
			t.Fatalf("setup with a new exchange: exit %d %q %q", code, out, stderr)
		}
	}
	if err := ch.ExchangeDeclarePassive(newEx, "topic", true, false, false, false, nil); err != nil {
		t.Fatalf("exchange %s not declared as a durable topic exchange: %v", newEx, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--broker", "amqp://guest:s3cret@", "--queue", q}, "names no host"},
		{[]string{"--broker", url}, "--queue is required"},
		{[]string{"--broker", url, "--stream", "S", "--subjects", "s"}, "for NATS"},
		{[]string{"--broker", url, "--queue", q, "--topics", "other"}, "default exchange"},
		{[]string{"--broker", url + "?exchange=" + ex, "--queue", q}, "--topics is required"},
		{[]string{"--broker", url + "?exchnage=" + ex, "--queue", q}, "unknown parameter"},
	} {
		code, _, stderr := runCLI(append([]string{"broker", "setup"}, c.args...)...)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "s3cret") {
			t.Errorf("broker setup %v: exit %d, %q; want exit %d saying %q", c.args, code, stderr, exitUsage, c.want)
		}
	}
}

// outbox relay --broker amqp://… delivers what is in the table to
// RabbitMQ, and outbox relay --broker mqtt://… to Mosquitto.
func TestRelayDeliversToRabbitMQAndMQTT(t *testing.T) {
	t.Run("amqp", func(t *testing.T) {
		url := testenv.Require(t, testenv.RabbitMQ)
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		q := teststores.UniqueTable("cli_relay_q_")
		if _, err := ch.QueueDeclare(q, false, true, false, false, nil); err != nil {
			t.Fatal(err)
		}
		d, err := ch.Consume(q, "", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 100)
		go func() {
			for m := range d {
				got <- m.MessageId
			}
		}()
		relayTo(t, url, q, got)
	})
	t.Run("mqtt", func(t *testing.T) {
		url := testenv.Require(t, testenv.MQTT)
		topic := teststores.UniqueTable("cli/relay_")
		got := make(chan string, 100)
		conn, err := net.Dial("tcp", strings.TrimPrefix(url, "mqtt://"))
		if err != nil {
			t.Fatal(err)
		}
		c := paho.NewClient(paho.ClientConfig{ClientID: topic, Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
			func(pr paho.PublishReceived) (bool, error) {
				got <- pr.Packet.Properties.User.Get("id")
				return true, nil
			}}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.Connect(ctx, &paho.Connect{ClientID: topic, KeepAlive: 30, CleanStart: true}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Disconnect(&paho.Disconnect{}); <-c.Done() }()
		if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}}); err != nil {
			t.Fatal(err)
		}
		relayTo(t, url, topic, got)
	})
}

// relayTo enqueues 20 events on topic in SQLite, runs outbox relay to
// brokerURL until got has seen all of them, and stops it.
func relayTo(t *testing.T, brokerURL, topic string, got <-chan string) {
	t.Helper()
	o := teststores.Open(t, "sqlite", store.Options{})
	want := map[string]bool{}
	for range 20 {
		m := outbox.Message{EventID: outbox.NewEventID(), Topic: topic, Key: "k", Type: "T", Payload: []byte("x")}
		if err := o.Store.Enqueue(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		want[m.EventID] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	var stderr bytes.Buffer
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return stderr.Write(p) })
	go func() {
		done <- Main(ctx, []string{"relay", "--db", o.URL, "--table", o.Opts.Table, "--broker", brokerURL, "--poll", "20ms"}, &bytes.Buffer{}, w)
	}()
	timeout := time.After(30 * time.Second)
	for len(want) > 0 {
		select {
		case id := <-got:
			delete(want, id)
		case <-timeout:
			mu.Lock()
			t.Fatalf("%d events never arrived; relay said: %s", len(want), stderr.String())
		}
	}
	cancel()
	if code := <-done; code != exitOK {
		mu.Lock()
		t.Errorf("relay exit %d: %s", code, stderr.String())
	}
}
