package wire_test

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/internal/testenv"
)

// TestOpenMQTTBroker: an mqtt:// --broker opens against the local
// Mosquitto; an unreachable server or a bad URL give a one-line error that
// never shows the password, URL mistakes as usage errors (exit 2).
func TestOpenMQTTBroker(t *testing.T) {
	t.Parallel()
	mqtt := testenv.Require(t, testenv.MQTT)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	br, err := wire.OpenBroker(ctx, mqtt+"?client_id=outbox-wire-test")
	if err != nil {
		t.Fatalf("OpenBroker(%s): %v", mqtt, err)
	}
	_ = br.Close(ctx)

	closed := closedPort(t)
	for _, c := range []openCase{
		{"mqtt unreachable", "mqtt://relay:S3CRET@" + closed, false, []string{"S3CRET"}, []string{"relay:xxxxx@" + closed}},
		{"mqtt unencoded #", "mqtt://relay:S3#CRET@" + closed, true, []string{":S3", "CRET"}, []string{"percent-encode", "%23"}},
		{"mqtt no host", "mqtt://relay:S3CRET@", true, []string{"S3CRET"}, []string{"names no host"}},
		{"mqtt unknown parameter", "mqtts://relay:S3CRET@" + closed + "?clientid=x", true, []string{"S3CRET"}, []string{`unknown parameter "clientid"`, "client_id"}},
		{"mqtt bad max_message", "mqtt://relay:S3CRET@" + closed + "?max_message=-1", true, []string{"S3CRET"}, []string{"max_message"}},
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
