package cli

import (
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox/internal/testenv"
	"github.com/outbox-go/outbox/internal/teststores"
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
