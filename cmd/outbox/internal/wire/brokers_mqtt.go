package wire

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/mqttbroker"
)

// mqttParams are the query parameters an mqtt:// --broker URL may carry.
var mqttParams = []string{"client_id", "source", "max_message"}

// openMQTT opens mqtt://[user:pass@]host:1883 or mqtts://…:8883.
func openMQTT(_ context.Context, raw string, u *url.URL) (broker.Broker, error) {
	if err := checkUserinfo("broker", raw, goUserinfo); err != nil {
		return nil, err
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("%w: --broker %s names no host; say which server, e.g. mqtt://127.0.0.1:1883", ErrUsage, Mask(raw))
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("%w: the query of --broker %s is malformed: %v", ErrUsage, Mask(raw), err)
	}
	for name, vals := range q {
		if !contains(mqttParams, name) {
			return nil, fmt.Errorf("%w: --broker %s: unknown parameter %q; the mqtt URL takes %s", ErrUsage, Mask(raw), name, strings.Join(mqttParams, ", "))
		}
		if len(vals) > 1 {
			return nil, fmt.Errorf("%w: --broker %s: parameter %q given %d times; give it once", ErrUsage, Mask(raw), name, len(vals))
		}
	}
	cfg := mqttbroker.Config{ClientID: q.Get("client_id"), Source: q.Get("source")}
	if v := q.Get("max_message"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > mqttbroker.MaxPacket {
			return nil, fmt.Errorf("%w: --broker %s: max_message=%q is not a number of bytes from 1 to %d", ErrUsage, Mask(raw), v, mqttbroker.MaxPacket)
		}
		cfg.MaxMessage = n
	}
	return mqttbroker.Dial(raw, cfg)
}
