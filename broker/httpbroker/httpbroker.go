package httpbroker

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/internal/redact"
)

// Defaults for Config fields left at zero.
const (
	DefaultTimeout       = 10 * time.Second
	DefaultMaxInFlight   = 16
	DefaultMaxRetryAfter = time.Hour
)

// TopicPlaceholder in the URL template is replaced by each event's topic,
// escaped for where it stands (path or query).
const TopicPlaceholder = "{topic}"

// SecretPrefix starts a Standard Webhooks secret: whsec_ and the key in
// base64.
const SecretPrefix = "whsec_"

// SecretQuery is the query parameter Dial takes the signing secret from
// (and removes, so the secret is never sent in the URL).
const SecretQuery = "webhook_secret"

var (
	// ErrClosed is every event's result after Close. It wraps
	// broker.ErrUnavailable.
	ErrClosed = fmt.Errorf("httpbroker: broker is closed (%w)", broker.ErrUnavailable)
	// ErrRejected is wrapped when the endpoint answered 4xx (but 408 or
	// 429): the event is refused for good (permanent).
	ErrRejected = errors.New("the endpoint refused the event")
	// ErrRedirected is wrapped (permanent) when the endpoint answered with
	// a redirect, which is not followed: a POST redirected may arrive as a
	// GET without its body, or at a host the URL did not name.
	ErrRedirected = errors.New("the endpoint redirected the request")
)

// Config configures a Broker. The zero value is ready to use: no signing.
type Config struct {
	// Secret, when set, signs each request the Standard Webhooks way
	// (webhook-id, webhook-timestamp, webhook-signature). It is the
	// endpoint's secret in the spec's form: whsec_ and a base64 key of at
	// least 24 bytes. Never shown in errors.
	Secret string
	// Timeout bounds one request: connecting, sending, and reading the
	// response's status. An earlier ctx deadline wins. Default 10s.
	Timeout time.Duration
	// MaxInFlight bounds the requests in flight at once, across concurrent
	// Publish calls (Features.MaxInFlight). Default 16.
	MaxInFlight int
	// MaxRetryAfter caps the delay an endpoint can ask for with
	// Retry-After, so one answer cannot hold an event for days. Default 1h.
	MaxRetryAfter time.Duration
	// MaxMessage, when positive, is the largest payload plus headers the
	// Broker sends; larger events are refused (permanent; Check refuses
	// them at enqueue). Default 0: no limit of its own (the endpoint's 413
	// is permanent anyway).
	MaxMessage int
	// Source is the CloudEvents source attribute (ce-source). Default
	// broker.SourceDefault ("outbox").
	Source string
	// TLSConfig is used by the transport Dial builds; nil means Go's
	// defaults, which verify the server's certificate. New ignores it.
	TLSConfig *tls.Config
}

// WithDefaults returns c with the default in every zero field.
func (c Config) WithDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxRetryAfter == 0 {
		c.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if c.Source == "" {
		c.Source = broker.SourceDefault
	}
	return c
}

// validate refuses what WithDefaults left unusable.
func (c Config) validate() error {
	switch {
	case c.Timeout < 0:
		return fmt.Errorf("httpbroker: Config.Timeout is %v; use 0 for the default (%v) or a positive duration", c.Timeout, DefaultTimeout)
	case c.MaxInFlight < 0:
		return fmt.Errorf("httpbroker: Config.MaxInFlight is %d; use 0 for the default (%d) or a positive number", c.MaxInFlight, DefaultMaxInFlight)
	case c.MaxRetryAfter < 0:
		return fmt.Errorf("httpbroker: Config.MaxRetryAfter is %v; use 0 for the default (%v) or a positive duration", c.MaxRetryAfter, DefaultMaxRetryAfter)
	case c.MaxMessage < 0:
		return fmt.Errorf("httpbroker: Config.MaxMessage is %d; use 0 (no limit) or a positive size in bytes", c.MaxMessage)
	}
	if err := broker.CheckSource(c.Source); err != nil {
		return fmt.Errorf("httpbroker: Config.Source %q: %w", c.Source, err)
	}
	return nil
}

// DecodeSecret returns the HMAC key of a Standard Webhooks secret
// (whsec_<base64>). Its errors never quote the secret.
func DecodeSecret(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, errors.New("httpbroker: the webhook secret does not start with whsec_; give it in the Standard Webhooks form, whsec_ and a base64 key (for example whsec_ + `openssl rand -base64 32`)")
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		if key, err = base64.RawStdEncoding.DecodeString(b64); err != nil {
			return nil, errors.New("httpbroker: the webhook secret after whsec_ is not valid base64; copy it whole, as the endpoint's owner gave it")
		}
	}
	if len(key) < 24 {
		return nil, fmt.Errorf("httpbroker: the webhook secret's key is %d bytes; Standard Webhooks asks for 24 to 64 (whsec_ + `openssl rand -base64 32`)", len(key))
	}
	return key, nil
}

// Broker POSTs events to an HTTP endpoint. It is safe for concurrent use.
type Broker struct {
	client *http.Client
	owned  bool // Dial built the transport, so Close closes its connections
	target template
	cfg    Config
	key    []byte // HMAC key; nil = no signing
	source string // percent-encoded Config.Source
	slots  chan struct{}

	gate broker.Gate // Publish calls in progress; Close
}

// template is a parsed URL template.
type template struct {
	raw     string // as given, for errors (redacted)
	before  string // up to {topic}, or the whole URL
	after   string // after {topic}
	inQuery bool   // {topic} stands in the query
	has     bool   // the template holds {topic}
}

func parseTemplate(raw string) (template, error) {
	t := template{raw: raw, before: raw}
	if i := strings.Index(raw, TopicPlaceholder); i >= 0 {
		t.has = true
		t.before, t.after = raw[:i], raw[i+len(TopicPlaceholder):]
		t.inQuery = strings.Contains(t.before, "?")
		if strings.Contains(t.after, TopicPlaceholder) {
			return t, fmt.Errorf("httpbroker: URL %s holds %s more than once; use it once", redact.URL(raw), TopicPlaceholder)
		}
	}
	u, err := url.Parse(t.url("topic"))
	if err != nil {
		return t, redact.Error(fmt.Errorf("httpbroker: URL %s: %w", redact.URL(raw), err), raw)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return t, fmt.Errorf("httpbroker: URL %s: the scheme must be http or https", redact.URL(raw))
	}
	if u.Host == "" {
		return t, fmt.Errorf("httpbroker: URL %s names no host; use https://host/path/{topic}", redact.URL(raw))
	}
	if u.User != nil {
		return t, fmt.Errorf("httpbroker: URL %s carries user info; webhooks authenticate with the signing secret (Config.Secret), not a password in the URL", redact.URL(raw))
	}
	return t, nil
}

// url is the endpoint for topic.
func (t template) url(topic string) string {
	if !t.has {
		return t.before
	}
	esc := url.PathEscape(topic)
	if t.inQuery {
		esc = url.QueryEscape(topic)
	}
	return t.before + esc + t.after
}

// New returns a Broker that POSTs through client, which the caller owns
// (nil means a client of the Broker's own, as Dial builds). The client
// should not follow redirects (Broker refuses them anyway: a 3xx is a
// permanent error) and should verify TLS certificates. urlTemplate is
// the endpoint, http:// or https://, with {topic} where the event's topic
// goes (https://hooks.example/{topic}); without {topic} every event goes
// to the same URL.
func New(client *http.Client, urlTemplate string, cfg Config) (*Broker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var key []byte
	if cfg.Secret != "" {
		var err error
		if key, err = DecodeSecret(cfg.Secret); err != nil {
			return nil, err
		}
	}
	t, err := parseTemplate(urlTemplate)
	if err != nil {
		return nil, err
	}
	owned := client == nil
	if owned {
		client = newClient(cfg.TLSConfig)
	}
	return &Broker{
		client: client, owned: owned, target: t, cfg: cfg, key: key,
		source: broker.PercentEncode(cfg.Source),
		slots:  make(chan struct{}, cfg.MaxInFlight),
	}, nil
}

// Dial returns a Broker for the endpoint urlTemplate with a client of its
// own (TLS verifying by default, no redirects followed, connections kept
// alive up to Config.MaxInFlight per host). A webhook_secret= query
// parameter, when present, is taken out of the URL as Config.Secret, so
// the secret is never sent in the URL. Dial does not contact the endpoint.
func Dial(urlTemplate string, cfg Config) (*Broker, error) {
	raw, secret, err := TakeSecret(urlTemplate)
	if err != nil {
		return nil, err
	}
	if secret != "" {
		cfg.Secret = secret
	}
	return New(nil, raw, cfg)
}

// TakeSecret removes the webhook_secret= query parameter from rawURL and
// returns the URL without it and the secret ("" when there is none). Its
// errors never show the secret.
func TakeSecret(rawURL string) (string, string, error) {
	base, query, ok := strings.Cut(rawURL, "?")
	if !ok {
		return rawURL, "", nil
	}
	frag := ""
	if i := strings.IndexByte(query, '#'); i >= 0 {
		query, frag = query[:i], query[i:]
	}
	var keep []string
	secret := ""
	for _, part := range strings.Split(query, "&") {
		name, val, _ := strings.Cut(part, "=")
		if name != SecretQuery {
			keep = append(keep, part)
			continue
		}
		v, err := url.QueryUnescape(val)
		if err != nil {
			return "", "", fmt.Errorf("httpbroker: URL %s: the %s parameter is not valid URL encoding; percent-encode it (+ as %%2B, / as %%2F, = as %%3D)", redact.URL(rawURL), SecretQuery)
		}
		secret = v
	}
	out := base
	if len(keep) > 0 {
		out += "?" + strings.Join(keep, "&")
	}
	return out + frag, secret, nil
}

func newClient(tc *tls.Config) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if tc != nil {
		tr.TLSClientConfig = tc
	}
	tr.MaxIdleConnsPerHost = 64
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

var _ broker.Describer = (*Broker)(nil)

// Features declares OrderKey and Config.MaxInFlight: a key's events are
// POSTed one after the other, each only once the one before was answered
// 2xx, and none after one that failed; events of different keys, and
// keyless ones, go in parallel. MaxMessage is Config.MaxMessage.
func (b *Broker) Features() broker.Features {
	return broker.Features{Ordering: broker.OrderKey, MaxInFlight: b.cfg.MaxInFlight, MaxMessage: b.cfg.MaxMessage}
}

// Close stops new publishes (they fail with ErrClosed), waits for the
// requests in progress until ctx ends, then closes the idle connections of
// the client Dial built. Safe to call more than once.
func (b *Broker) Close(ctx context.Context) error {
	return b.gate.Close(ctx, "httpbroker: closing with requests still in flight", func() error {
		if b.owned {
			b.client.CloseIdleConnections()
		}
		return nil
	})
}

// isDialError reports whether err happened before any byte of the request
// left: no connection could be made (refused, no such host, TLS failed).
func isDialError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var cv *tls.CertificateVerificationError
	return errors.As(err, &cv)
}
