package wire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/rocketmqbroker"
)

// nameServerProbe bounds the connection attempt to one name server.
const nameServerProbe = 3 * time.Second

// openRocketMQ opens rocketmq://nameserver:9876[,…][?group=&namespace=…].
//
// rocketmq-client-go's producer starts without contacting a name server
// (it looks routes up in the background and at the first send), so a
// relay given an unreachable one would report ready and fail every send.
// A TCP connection to one of the name servers is required first: the
// relay then waits for it, retrying, as it waits for any other broker.
// It shows that something listens there, not that it is a name server;
// a wrong one fails the first sends, which the relay retries.
func openRocketMQ(ctx context.Context, raw string, _ *url.URL) (broker.Broker, error) {
	hosts, err := RocketMQNameServers(raw)
	if err != nil {
		return nil, err
	}
	if err := probeNameServers(ctx, hosts); err != nil {
		return nil, err
	}
	return rocketmqbroker.Dial(raw, rocketmqbroker.Config{})
}

// RocketMQNameServers checks a rocketmq:// URL without connecting and
// returns its name server addresses, as host:port. Its errors wrap
// ErrUsage.
func RocketMQNameServers(raw string) ([]string, error) {
	if err := rocketmqbroker.CheckURL(raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	hl, err := broker.ParseHostList(raw, broker.HostListSpec{
		Adapter: "rocketmqbroker", Scheme: "rocketmq", Host: "name server", Userinfo: "accesskey:secretkey", Example: "127.0.0.1:9876", RequirePort: true,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	// ParseHostList leaves the port to the client, which would only fail
	// to connect: a port out of range is a typing error, not an outage.
	for _, h := range hl.Hosts {
		_, port, err := net.SplitHostPort(h)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%w: --broker %s: name server %q has no valid port; give host:port, e.g. 127.0.0.1:9876", ErrUsage, Mask(raw), h)
		}
	}
	return hl.Hosts, nil
}

// probeNameServers returns nil once one of hosts accepts a TCP
// connection, else an error naming each and why.
func probeNameServers(ctx context.Context, hosts []string) error {
	var errs []string
	for _, h := range hosts {
		pctx, cancel := context.WithTimeout(ctx, nameServerProbe)
		var d net.Dialer
		c, err := d.DialContext(pctx, "tcp", h)
		cancel()
		if err == nil {
			_ = c.Close()
			return nil
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			err = op.Err
		}
		errs = append(errs, h+": "+err.Error())
	}
	return fmt.Errorf("rocketmqbroker: no RocketMQ name server reachable (%s): start one, or name a reachable one in --broker", strings.Join(errs, "; "))
}

// LogRocketMQTo routes rocketmq-client-go's own log lines, which it would
// print on stderr through logrus, to l: its info and debug lines (routes
// refreshed, heartbeats) at debug level, its warnings and errors at warn.
// rlog keeps its logger in a package variable it reads without a lock, so
// it is set once, to a logger that writes to the latest l (two relays run
// in one process in tests: setting it twice was a data race).
func LogRocketMQTo(l *slog.Logger) {
	rocketmqTarget.Store(l)
	rocketmqOnce.Do(func() { rlog.SetLogger(rocketmqLog{}) })
}

var (
	rocketmqTarget atomic.Pointer[slog.Logger]
	rocketmqOnce   sync.Once
)

// rocketmqLog is an rlog.Logger writing to the latest LogRocketMQTo
// logger.
type rocketmqLog struct{}

func (r rocketmqLog) log(level slog.Level, msg string, fields map[string]any) {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, fields[k]))
	}
	if l := rocketmqTarget.Load(); l != nil {
		l.Log(context.Background(), level, "rocketmq-client-go: "+msg, attrs...)
	}
}

func (r rocketmqLog) Debug(msg string, fields map[string]any)   { r.log(slog.LevelDebug, msg, fields) }
func (r rocketmqLog) Info(msg string, fields map[string]any)    { r.log(slog.LevelDebug, msg, fields) }
func (r rocketmqLog) Warning(msg string, fields map[string]any) { r.log(slog.LevelWarn, msg, fields) }
func (r rocketmqLog) Error(msg string, fields map[string]any)   { r.log(slog.LevelWarn, msg, fields) }

// Fatal logs at error level; rlog's own exits the process, which a relay
// holding claims must not do on a client library's word.
func (r rocketmqLog) Fatal(msg string, fields map[string]any) { r.log(slog.LevelError, msg, fields) }

// Level and OutputPath are the slog.Logger's to decide.
func (rocketmqLog) Level(string)            {}
func (rocketmqLog) OutputPath(string) error { return nil }
