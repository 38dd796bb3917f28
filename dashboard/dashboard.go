package dashboard

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outbox-go/outbox/relay"
	"github.com/outbox-go/outbox/store"
)

//go:embed assets
var assets embed.FS

// Config configures New. Zero values take the documented defaults;
// negative ones are refused.
type Config struct {
	// Store is the outbox shown; required.
	Store store.Store
	// Relay, when set, adds its health and its delivery rate to the page;
	// default none: the page shows the table alone.
	Relay *relay.Relay
	// Token enables the actions (retry, skip, purge) for requests that
	// carry it as "Authorization: Bearer <Token>"; default empty: the
	// dashboard is read-only.
	Token string
	// ReadOnlyHint is what the page says, when Token is empty, on how to
	// enable actions; default a generic sentence.
	ReadOnlyHint string
	// SampleEvery is how often the backlog and the relay's counters are
	// sampled for the chart; default 2s.
	SampleEvery time.Duration
	// History is how many samples the chart keeps; default 900 (half an
	// hour at 2s).
	History int
	// PreviewBytes caps each payload preview (and each last error);
	// default 1024, at most store.PreviewBytes (what the store reads of a
	// DEAD event's payload).
	PreviewBytes int
	// Logger receives one line per action taken; default slog.Default().
	Logger *slog.Logger
	// Hosts are the host names (the request's Host header, without the
	// port) the dashboard answers besides IP addresses and localhost; "*"
	// allows any. Default none: a web page that rebinds its own domain
	// name to 127.0.0.1 (DNS rebinding) cannot read the dead letters
	// through the operator's browser. Behind a reverse proxy, list the
	// name it is reached by.
	Hosts []string
}

// Defaults of Config.
const (
	DefaultSampleEvery  = 2 * time.Second
	DefaultHistory      = 900
	DefaultPreviewBytes = 1024
	// MaxPageSize is the most dead events one /api/dead request returns.
	MaxPageSize = 200
	// MaxSkipPayload is the largest payload skip's answer carries whole
	// (base64); a larger one is left out, with how to save it first.
	MaxSkipPayload = 1 << 20
	// MaxHeavyRequests is how many API requests that read the database
	// (dead lists, events, actions) run at once; others wait for a
	// place, and get 503 after heavyWait.
	MaxHeavyRequests = 4
)

// heavyWait is how long an API request waits for a place among
// MaxHeavyRequests.
const heavyWait = 5 * time.Second

// WithDefaults returns c with its zero values replaced by the defaults.
func (c Config) WithDefaults() Config {
	if c.SampleEvery == 0 {
		c.SampleEvery = DefaultSampleEvery
	}
	if c.History == 0 {
		c.History = DefaultHistory
	}
	if c.PreviewBytes == 0 {
		c.PreviewBytes = DefaultPreviewBytes
	}
	if c.ReadOnlyHint == "" {
		c.ReadOnlyHint = "This dashboard is read-only: it was started without a token. Start it with one to enable retry, skip and purge."
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("dashboard: Config.Store is required")
	case c.SampleEvery < 0 || c.History < 0 || c.PreviewBytes < 0:
		return errors.New("dashboard: SampleEvery, History and PreviewBytes must not be negative (0 means the default)")
	case c.PreviewBytes > store.PreviewBytes:
		return fmt.Errorf("dashboard: PreviewBytes %d is above %d, what a store reads of a payload for a list", c.PreviewBytes, store.PreviewBytes)
	case c.SampleEvery < 10*time.Millisecond:
		return fmt.Errorf("dashboard: SampleEvery %s is below 10ms", c.SampleEvery)
	case c.History < 2:
		return fmt.Errorf("dashboard: History %d must be at least 2 samples", c.History)
	case slices.ContainsFunc(c.Hosts, func(h string) bool { return h == "" || strings.ContainsAny(h, " \t\r\n/:") }):
		return fmt.Errorf("dashboard: Hosts %q: give host names without ports or schemes, e.g. outbox.internal", c.Hosts)
	case strings.ContainsAny(c.Token, " \t\r\n"):
		return errors.New("dashboard: Token must not contain spaces or line breaks (a trailing newline from a token file? trim it)")
	}
	return nil
}

// Dashboard is the handler New returns. Close it to stop its sampling.
type Dashboard struct {
	cfg       Config
	tokenHash [sha256.Size]byte
	samples   *sampler
	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	heavy     chan struct{} // places of MaxHeavyRequests
}

var _ http.Handler = (*Dashboard)(nil)

// New checks c and returns a dashboard that samples in the background
// until Close.
func New(c Config) (*Dashboard, error) {
	c = c.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	d := &Dashboard{cfg: c, done: make(chan struct{}), heavy: make(chan struct{}, MaxHeavyRequests)}
	if c.Token != "" {
		d.tokenHash = sha256.Sum256([]byte(c.Token))
	}
	d.samples = newSampler(c.Store, c.Relay, c.History)
	ctx, cancel := context.WithCancel(context.Background())
	d.stop = cancel
	go func() {
		defer close(d.done)
		d.samples.run(ctx, c.SampleEvery)
	}()
	return d, nil
}

// Close stops the background sampling. The handler keeps answering, with
// the last samples. Safe to call more than once.
func (d *Dashboard) Close() error {
	d.closeOnce.Do(func() {
		d.stop()
		<-d.done
	})
	return nil
}

// actionsEnabled reports whether a token was configured.
func (d *Dashboard) actionsEnabled() bool { return d.cfg.Token != "" }

// authorized checks the request's bearer token in constant time (of equal
// length hashes, so the token's length does not leak either).
func (d *Dashboard) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(h[len(prefix):])))
	return subtle.ConstantTimeCompare(got[:], d.tokenHash[:]) == 1
}

// hostAllowed reports whether the request's Host is an IP address,
// localhost, or one of Config.Hosts.
func (d *Dashboard) hostAllowed(r *http.Request) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "" || host == "localhost" || strings.HasSuffix(host, ".localhost") || net.ParseIP(host) != nil {
		return true
	}
	for _, h := range d.cfg.Hosts {
		if h == "*" || strings.EqualFold(strings.TrimSuffix(h, "."), host) {
			return true
		}
	}
	return false
}

// ServeHTTP serves the page, its assets and the JSON API.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	if !d.hostAllowed(r) {
		http.Error(w, "dashboard: the host name "+strconvQuote(r.Host)+" is not allowed: reach the dashboard by its IP address or localhost, or add the name to its allowed hosts (Config.Hosts, --dashboard-host)", http.StatusMisdirectedRequest)
		return
	}
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	path := r.URL.Path
	if strings.HasPrefix(path, "/api/") {
		h.Set("Cache-Control", "no-store")
		d.serveAPI(w, r, strings.TrimPrefix(path, "/api/"))
		return
	}
	file, ctype := "", ""
	switch path {
	case "/", "", "/index.html":
		file, ctype = "assets/index.html", "text/html; charset=utf-8"
	case "/app.js":
		file, ctype = "assets/app.js", "text/javascript; charset=utf-8"
	case "/app.css":
		file, ctype = "assets/app.css", "text/css; charset=utf-8"
	default:
		http.Error(w, "dashboard: no such page: "+path, http.StatusNotFound)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "dashboard: "+r.Method+" is not allowed here; use GET", http.StatusMethodNotAllowed)
		return
	}
	b, err := assets.ReadFile(file)
	if err != nil { // cannot happen: the files are embedded
		http.Error(w, "dashboard: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h.Set("Content-Type", ctype)
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

// strconvQuote quotes a header value for an error message, capped.
func strconvQuote(s string) string {
	if len(s) > 100 {
		s = s[:100]
	}
	return strconv.Quote(s)
}
