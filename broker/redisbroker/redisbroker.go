package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/internal/redact"
)

// Defaults for Config fields left at zero.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultDedupWindow = 24 * time.Hour
	DefaultDedupPrefix = "outbox:dedup:"
	// DefaultMaxMessage is Redis's proto-max-bulk-len default (512 MiB),
	// the most one field of a command may hold.
	DefaultMaxMessage = 512 << 20
)

var (
	// ErrClosed is every event's result after Close. It wraps
	// broker.ErrUnavailable, so a relay that is shutting down buries
	// nothing.
	ErrClosed = fmt.Errorf("redisbroker: broker is closed (%w)", broker.ErrUnavailable)
	// ErrNotStream is wrapped (as a permanent error) when the key named by
	// an event's topic holds something other than a stream.
	ErrNotStream = errors.New("the key holds a value that is not a stream")
	// ErrInvalidTopic is wrapped when an event's topic cannot name a
	// stream (it is empty).
	ErrInvalidTopic = errors.New("topic cannot name a Redis stream")
	// ErrInvalidURL is wrapped by Dial's errors about the URL itself (as
	// opposed to the server it names).
	ErrInvalidURL = errors.New("invalid Redis URL")
)

// Config configures a Broker. The zero value is ready to use.
type Config struct {
	// Timeout bounds one Publish call: writing the pipeline and reading
	// every reply. An earlier ctx deadline wins. Default 10s.
	Timeout time.Duration
	// Source is the CloudEvents source attribute (field ce_source).
	// Default broker.SourceDefault ("outbox").
	Source string
	// MaxLen, when positive, trims each stream to about that many entries
	// as events are added (XADD … MAXLEN ~ MaxLen): Redis trims whole
	// macro nodes, so a stream may hold somewhat more. 0 (the default)
	// never trims. The URL's maxlen= sets it.
	MaxLen int64
	// DedupWindow is how long the Broker remembers at least an event id
	// it added (at most a quarter longer), so that the same event
	// published again (after a relay crash, or a reply lost with its
	// connection) is recognised, not added twice: it is then confirmed
	// with Result.Duplicate set and the entry id it was first stored
	// under. Default 24h. The URL's dedup= sets it.
	DedupWindow time.Duration
	// NoDedup turns the id check off: each publish is a plain XADD, and an
	// event re-published after a crash is added again (consumers drop it
	// with package inbox). The URL's dedup=off sets it.
	NoDedup bool
	// DedupPrefix starts the names of the hashes that remember event ids:
	// <prefix>{<stream's hash tag>}:<slice seconds>:<slice number>.
	// Default "outbox:dedup:".
	DedupPrefix string
	// MaxMessage is the largest entry the Broker adds, in bytes: the
	// payload plus every field name and value. Larger events are refused
	// (permanent; Check refuses them at enqueue). Default 512 MiB, Redis's
	// proto-max-bulk-len.
	MaxMessage int
}

// WithDefaults returns c with the default in every zero field.
func (c Config) WithDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.DedupWindow == 0 {
		c.DedupWindow = DefaultDedupWindow
	}
	if c.DedupPrefix == "" {
		c.DedupPrefix = DefaultDedupPrefix
	}
	if c.MaxMessage == 0 {
		c.MaxMessage = DefaultMaxMessage
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
		return fmt.Errorf("redisbroker: Config.Timeout is %v; use 0 for the default (%v) or a positive duration", c.Timeout, DefaultTimeout)
	case c.MaxLen < 0:
		return fmt.Errorf("redisbroker: Config.MaxLen is %d; use 0 (never trim) or a positive number of entries", c.MaxLen)
	case c.DedupWindow < 0:
		return fmt.Errorf("redisbroker: Config.DedupWindow is %v; use 0 for the default (%v), a positive duration, or NoDedup", c.DedupWindow, DefaultDedupWindow)
	case c.DedupWindow > 0 && c.DedupWindow < time.Second:
		return fmt.Errorf("redisbroker: Config.DedupWindow is %v; Redis keeps keys for whole seconds, use at least 1s", c.DedupWindow)
	case c.MaxMessage < 0:
		return fmt.Errorf("redisbroker: Config.MaxMessage is %d; use 0 for the default (%d) or a positive size in bytes", c.MaxMessage, DefaultMaxMessage)
	}
	if err := broker.CheckSource(c.Source); err != nil {
		return fmt.Errorf("redisbroker: Config.Source %q: %w", c.Source, err)
	}
	return nil
}

// Broker adds events to Redis streams. It is safe for concurrent use.
type Broker struct {
	rdb   redis.UniversalClient
	cfg   Config
	owned bool  // Dial made rdb, so Close closes it
	slice int64 // seconds of one slice of the dedup window
	// maxLen is MaxLen for the script ("0": no trimming)
	maxLen string
	// maxLenArg and sourceArg are MaxLen and Source boxed once, for XADD
	maxLenArg, sourceArg any

	gate broker.Gate // Publish calls in progress; Close
}

// New returns a Broker that publishes through rdb, a client the caller owns
// and keeps closing (a *redis.Client, a *redis.ClusterClient, …). For a
// Publish to end at its deadline while the server hangs, rdb should have
// ContextTimeoutEnabled set; Dial sets it.
func New(rdb redis.UniversalClient, cfg Config) (*Broker, error) {
	if rdb == nil {
		return nil, errors.New("redisbroker: New needs a client; pass one from redis.NewClient or use Dial")
	}
	cfg = cfg.WithDefaults()
	err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return newBroker(rdb, cfg, false), nil
}

func newBroker(rdb redis.UniversalClient, cfg Config, owned bool) *Broker {
	return &Broker{
		rdb: rdb, cfg: cfg, owned: owned,
		slice:     max(int64((cfg.DedupWindow+time.Second-1)/time.Second)/dedupBuckets, 1),
		maxLen:    strconv.FormatInt(cfg.MaxLen, 10),
		maxLenArg: cfg.MaxLen, sourceArg: cfg.Source,
	}
}

// Dial connects to the Redis server at url, redis://[user:password@]host:6379/db
// (rediss:// for TLS, verifying the server's certificate), and returns a
// Broker that owns the client. The query may hold the adapter's options,
// which override cfg: maxlen=N (Config.MaxLen), dedup=DURATION or
// dedup=off (Config.DedupWindow, Config.NoDedup), timeout=DURATION
// (Config.Timeout); the others are go-redis's own (dial_timeout=,
// pool_size=, …; see redis.ParseURL). The client does not retry commands
// itself (max_retries=-1 unless the URL says otherwise): the relay does.
// Dial fails when the server does not answer a PING within cfg.Timeout.
func Dial(rawURL string, cfg Config) (*Broker, error) {
	if rawURL == "" {
		rawURL = "redis://127.0.0.1:6379/0"
	}
	opt, err := parseURL(rawURL, &cfg)
	if err != nil {
		return nil, redact.Error(fmt.Errorf("redisbroker: URL %s: %w (%w)", redact.URL(rawURL), err, ErrInvalidURL), rawURL)
	}
	cfg = cfg.WithDefaults()
	err = cfg.validate()
	if err != nil {
		return nil, fmt.Errorf("%w (%w)", err, ErrInvalidURL)
	}
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		if refused(err) {
			return nil, broker.Refused(redact.Error(fmt.Errorf("redisbroker: connect to %s: %w: check the password (and user) in the URL and the user's ACL", redact.URL(rawURL), err), rawURL))
		}
		return nil, redact.Error(fmt.Errorf("redisbroker: connect to %s: %w; check that redis-server runs there and the password is right (%w)", redact.URL(rawURL), err, broker.ErrUnavailable), rawURL)
	}
	return newBroker(rdb, cfg, true), nil
}

// parseURL takes the adapter's own options out of the query into cfg and
// gives the rest to redis.ParseURL.
func parseURL(rawURL string, cfg *Config) (*redis.Options, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	switch strings.ToLower(u.Scheme) {
	case "redis", "rediss":
	default:
		return nil, fmt.Errorf("scheme %q is not redis:// or rediss://", u.Scheme)
	}
	q := u.Query()
	if v, ok := pop(q, "maxlen"); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("maxlen=%q is not a number of entries; use maxlen=100000, or leave it out to never trim", v)
		}
		cfg.MaxLen = n
	}
	if v, ok := pop(q, "dedup"); ok {
		switch strings.ToLower(v) {
		case "off", "false", "0", "no":
			cfg.NoDedup = true
		default:
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Second {
				return nil, fmt.Errorf("dedup=%q is not a duration of at least 1s nor off; use dedup=24h or dedup=off", v)
			}
			cfg.DedupWindow, cfg.NoDedup = d, false
		}
	}
	if v, ok := pop(q, "timeout"); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("timeout=%q is not a positive duration; use timeout=10s", v)
		}
		cfg.Timeout = d
	}
	retries := q.Has("max_retries")
	u.Scheme = strings.ToLower(u.Scheme)
	u.RawQuery = q.Encode()
	opt, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, err
	}
	if !retries {
		opt.MaxRetries = -1
	}
	opt.ContextTimeoutEnabled = true
	if opt.ClientName == "" {
		opt.ClientName = "outbox-relay"
	}
	return opt, nil
}

func pop(q url.Values, name string) (string, bool) {
	if !q.Has(name) {
		return "", false
	}
	v := q.Get(name)
	q.Del(name)
	return v, true
}

// Client returns the client the Broker publishes through.
func (b *Broker) Client() redis.UniversalClient { return b.rdb }

var _ broker.Describer = (*Broker)(nil)

// Features declares Config.MaxMessage as the largest message and no
// ordering unit (OrderNone): the commands of a pipeline run in order on
// one connection, but one that fails (OOM under maxmemory, WRONGTYPE on one
// topic) does not stop the ones after it, so a key's later event can be
// stored although its earlier one was not. The relay therefore sends a
// key's events one per Publish call.
func (b *Broker) Features() broker.Features {
	return broker.Features{MaxMessage: b.cfg.MaxMessage}
}

// Close stops new publishes (they fail with ErrClosed), waits for the
// Publish calls in progress until ctx ends, then closes the client if Dial
// made it. Safe to call more than once.
func (b *Broker) Close(ctx context.Context) error {
	return b.gate.Close(ctx, "redisbroker: closing with publishes still waiting for replies", func() error {
		if b.owned {
			if err := b.rdb.Close(); err != nil {
				return fmt.Errorf("redisbroker: close: %w", err)
			}
		}
		return nil
	})
}

// refused reports whether Redis answered a connection with a refusal no
// retry fixes: a wrong password (WRONGPASS), none given where one is
// required (NOAUTH), or an ACL that forbids the commands (NOPERM).
func refused(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "NOPERM")
}
