package wire_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/internal/testenv"
)

// TestOpenAMQPBroker: an amqp:// --broker opens against the local
// RabbitMQ; a wrong password, an unreachable server or a bad URL give a
// one-line error that never shows the password, URL mistakes as usage
// errors (exit 2).
func TestOpenAMQPBroker(t *testing.T) {
	t.Parallel()
	rabbit := testenv.Require(t, testenv.RabbitMQ)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	br, err := wire.OpenBroker(ctx, rabbit)
	if err != nil {
		t.Fatalf("OpenBroker(%s): %v", wire.Mask(rabbit), err)
	}
	_ = br.Close(ctx)

	closed := closedPort(t)
	for _, c := range []openCase{
		// RabbitMQ refusing the credentials or the vhost is a mistake in
		// the URL (exit 2): retrying would not fix it.
		{"amqp wrong password", withPassword(t, rabbit, "S3CRET"), true, []string{"S3CRET"}, []string{"RabbitMQ refused the credentials (403 ACCESS_REFUSED: username or password not allowed)", "guest:xxxxx@127.0.0.1:5672"}},
		{"amqp no such vhost", otherVhost(t, rabbit, "outbox_wire_no_such_vhost"), true, nil, []string{"RabbitMQ refused the vhost (530 NOT_ALLOWED", "outbox_wire_no_such_vhost"}},
		{"amqp unreachable", "amqp://guest:S3CRET@" + closed + "/", false, []string{"S3CRET"}, []string{closed}},
		{"amqp unencoded /", "amqp://guest:S3/CRET@" + closed + "/", true, []string{":S3", "CRET"}, []string{"percent-encode", "%2F"}},
		{"amqp no host", "amqp://guest:S3CRET@/", true, []string{"S3CRET"}, []string{"names no host"}},
		{"amqp unknown parameter", "amqps://guest:S3CRET@" + closed + "/?exchnage=orders", true, []string{"S3CRET"}, []string{`unknown parameter "exchnage"`, "exchange"}},
		{"amqp twice", "amqp://guest:S3CRET@" + closed + "/?exchange=a&exchange=b", true, []string{"S3CRET"}, []string{`"exchange" given 2 times`}},
		{"amqp bad max_message", "amqp://guest:S3CRET@" + closed + "/?max_message=big", true, []string{"S3CRET"}, []string{"max_message"}},
		{"amqp missing exchange", rabbit + "?exchange=outbox_wire_no_such_exchange", false, []string{"guest:guest"}, []string{"NOT_FOUND", "declare it first"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			br, err := wire.OpenBroker(ctx, c.raw)
			if br != nil {
				_ = br.Close(ctx)
			}
			checkOpenErr(t, c, err)
		})
	}
}

// otherVhost is raw with its path naming vhost.
func otherVhost(t *testing.T, raw, vhost string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Path, u.RawPath = "/"+vhost, ""
	return u.String()
}
