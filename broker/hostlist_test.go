package broker_test

import (
	"strings"
	"testing"

	"github.com/outbox-go/outbox/broker"
)

func TestParseHostList(t *testing.T) {
	spec := broker.HostListSpec{Adapter: "x", Scheme: "x", Host: "server", Userinfo: "user:secret", Example: "127.0.0.1:1", RequirePort: true}
	hl, err := broker.ParseHostList("x://u:s%40cret@h1:1, x://h2:2,h3:3/?a=1&a=2", spec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(hl.Hosts, " ") != "h1:1 h2:2 h3:3" || !hl.HasUser || hl.User != "u" || hl.Secret != "s@cret" || hl.Query.Get("a") != "1" {
		t.Fatalf("ParseHostList = %+v", hl)
	}
	if hl, err := broker.ParseHostList(" ", spec); err != nil || len(hl.Hosts) != 1 || hl.Hosts[0] != "127.0.0.1:1" {
		t.Fatalf("empty URL: %+v, %v", hl, err)
	}
	for raw, want := range map[string]string{
		"nats://u:sekret@h:1":  "the scheme must be x://",
		"x://h:1,u:sekret@h:2": "only the first server",
		"x://h":                "is not host:port",
		"x://h:1/path":         "is not host:port",
		"x://h:1?a=%zz":        "query string of the URL is malformed",
	} {
		_, err := broker.ParseHostList(raw, spec)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "sekret") {
			t.Errorf("%s: %v; want %q, without the secret", raw, err, want)
		}
	}
}
