package cli

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/internal/wire"
)

const brokerUsage = `broker setup --broker nats://host:4222 --stream NAME --subjects 'orders,orders.>'

Creates the JetStream stream NAME capturing the subjects (comma-separated,
wildcards allowed), or adds the subjects it lacks to an existing stream
NAME. Idempotent. An event whose topic no stream captures goes DEAD.`

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
	brokerURL := f.String("broker", os.Getenv("OUTBOX_BROKER"), "broker URL (or OUTBOX_BROKER): "+wire.BrokerSchemes)
	stream := f.String("stream", "", "JetStream stream name, e.g. ORDERS")
	subjects := f.String("subjects", "", "comma-separated subjects the stream captures, e.g. 'orders,orders.>'")
	if err := f.parse(e, args[1:]); err != nil {
		return err
	}
	if len(f.posArgs()) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", wire.ErrUsage, f.posArgs()[0])
	}
	if err := checkBrokerURL(*brokerURL, true); err != nil {
		return err
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
		return fmt.Errorf("%w: no broker given: pass --broker URL or set OUTBOX_BROKER (%s)", wire.ErrUsage, wire.BrokerSchemes)
	}
	scheme, _, _ := strings.Cut(raw, ":")
	switch strings.ToLower(scheme) {
	case "nats", "tls":
	default:
		// NATS is the only adapter built in: for any other scheme
		// OpenBroker answers at once with the usage error naming the
		// schemes it knows, so it is refused before the database is opened.
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
			return fmt.Errorf("%w: --broker is not a URL (%d characters given); use %s", wire.ErrUsage, len(raw), wire.BrokerSchemes)
		}
		if u.Hostname() == "" {
			return fmt.Errorf("%w: --broker %s names no host; say which server, e.g. nats://127.0.0.1:4222", wire.ErrUsage, wire.Mask(part))
		}
	}
	return nil
}
