package natsbroker_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/outbox-go/outbox/broker/natsbroker"
)

// TestDialErrorsHideSecrets: whatever goes wrong connecting, and whatever
// form the credentials take in the URL, Dial's error names the server but
// never a password or token, and still says what is wrong.
func TestDialErrorsHideSecrets(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()

	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, Authorization: "RIGHTTOKEN", JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded NATS did not start")
	}
	authed := ns.Addr().String()

	for _, c := range []struct {
		name, url string
		secrets   []string
		says      []string // what the message must still tell
	}{
		{"token, closed port", "nats://S3CRETTOKEN@" + closed, []string{"S3CRETTOKEN"}, []string{closed, "no servers"}},
		{"user and password, closed port", "nats://alice:S3CRETPW@" + closed, []string{"S3CRETPW"}, []string{"alice", closed}},
		{"list of servers", "nats://alice:S3CRETPW@" + closed + ",nats://S3CRETTOKEN@" + closed, []string{"S3CRETPW", "S3CRETTOKEN"}, []string{"alice", closed}},
		{"bad escape quoted by nats.go", "nats://alice:S3CRET%zz@" + closed, []string{"S3CRET"}, []string{"alice", "escape"}},
		{"blank in password quoted by nats.go", "nats://alice:S3CRET PW@" + closed, []string{"S3CRET"}, []string{"alice", "userinfo"}},
		{"one-character password", "nats://alice:1@127.0.0.1:" + strings.Split(closed, ":")[1], []string{":1@"}, []string{"127.0.0.1"}},
		{"wrong token", "nats://WRONGTOKEN@" + authed, []string{"WRONGTOKEN"}, []string{authed, "uthorization"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := natsbroker.Dial(c.url, natsbroker.Config{Timeout: 2 * time.Second})
			if err == nil {
				_ = b.Close(t.Context())
				t.Fatal("Dial succeeded")
			}
			msg := err.Error()
			t.Log(msg)
			for _, s := range c.secrets {
				if strings.Contains(msg, s) {
					t.Errorf("the error shows %q: %s", s, msg)
				}
			}
			for _, s := range c.says {
				if !strings.Contains(msg, s) {
					t.Errorf("the error does not say %q: %s", s, msg)
				}
			}
		})
	}
}
