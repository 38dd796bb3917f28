package mysqlstore

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/go-sql-driver/mysql"
)

// DefaultDialTimeout bounds connecting when the URL sets no timeout.
const DefaultDialTimeout = 10 * time.Second

// DSN turns a database URL of the form
//
//	mysql://user:pass@host:3306/db?param=value
//
// (scheme mysql or mariadb; host defaults to 127.0.0.1, port to 3306) into a
// go-sql-driver/mysql DSN for sql.Open("mysql", dsn). Query parameters are the
// driver's (tls, charset, readTimeout, …; unknown names become session
// variables) plus socket=/path for a Unix socket. Unless the URL says
// otherwise it sets parseTime=true, interpolateParams=true (one round trip
// per statement instead of prepare+execute), maxAllowedPacket=0 (ask the
// server), timeout=10s and the session time_zone '+00:00'.
//
// Errors never contain the password.
func DSN(rawURL string) (string, error) {
	cfg, err := parseURL(rawURL)
	if err != nil {
		return "", err
	}
	return cfg.FormatDSN(), nil
}

const urlForm = "use mysql://user:pass@host:3306/dbname"

// badURL formats a one-line error (whatever the URL held) that never
// includes the password: callers pass only parts already separated from it.
func badURL(format string, args ...any) error {
	msg := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, fmt.Sprintf(format, args...))
	return fmt.Errorf("%w: %s; %s", ErrBadURL, msg, urlForm)
}

// ErrBadURL is wrapped by the errors of DSN and Open about the URL itself
// (it cannot be parsed, or a parameter has a bad value), as opposed to a
// server that cannot be reached: retrying cannot fix it.
var ErrBadURL = errors.New("mysqlstore: bad database URL")

// parseURL builds the driver's Config from a database URL.
func parseURL(rawURL string) (*mysql.Config, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the whole URL, password included: keep only
		// the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, badURL("%v", err)
	}
	switch u.Scheme {
	case "mysql", "mariadb":
	case "":
		return nil, badURL("no scheme")
	default:
		return nil, badURL("scheme %q is not mysql", u.Scheme)
	}
	if u.Opaque != "" || !strings.HasPrefix(rawURL[len(u.Scheme)+1:], "//") {
		return nil, badURL("expected // after %s:", u.Scheme)
	}
	if u.Fragment != "" {
		return nil, badURL("unexpected #fragment")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, badURL("query: %v", err)
	}

	// Apply the URL's parameters through the driver's own DSN parser (re-encoded,
	// so a '/' in a value cannot be mistaken for the database separator), then
	// fill our defaults for what the URL left unset.
	socket := q.Get("socket")
	q.Del("socket")
	for k, vs := range q {
		if len(vs) > 1 {
			return nil, badURL("parameter %q given %d times", k, len(vs))
		}
	}
	cfg, err := mysql.ParseDSN("/?" + q.Encode())
	if err != nil {
		return nil, badURL("parameter: %v", err)
	}
	if !q.Has("parseTime") {
		cfg.ParseTime = true
	}
	if !q.Has("interpolateParams") {
		cfg.InterpolateParams = true
	}
	if !q.Has("maxAllowedPacket") {
		cfg.MaxAllowedPacket = 0
	}
	if !q.Has("timeout") {
		cfg.Timeout = DefaultDialTimeout
	}
	if !q.Has("time_zone") {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["time_zone"] = "'+00:00'"
	}

	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
		if cfg.User == "" && cfg.Passwd != "" {
			return nil, badURL("password without user name")
		}
	}
	host, port := u.Hostname(), u.Port()
	if u.Host != "" && host == "" {
		return nil, badURL("empty host")
	}
	if strings.IndexFunc(host, badHostRune) >= 0 {
		return nil, badURL("host %q has characters a host name or IP address cannot have", host)
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, badURL("port %q out of range", port)
		}
	}
	if socket != "" {
		if port != "" {
			return nil, badURL("both a port and socket= given")
		}
		if strings.ContainsAny(socket, "()@") {
			return nil, badURL("socket path %q contains a parenthesis or @", socket)
		}
		cfg.Net, cfg.Addr = "unix", socket
	} else {
		if host == "" {
			host = "127.0.0.1"
		}
		if port == "" {
			port = "3306"
		}
		cfg.Net, cfg.Addr = "tcp", net.JoinHostPort(host, port)
	}
	db := strings.TrimPrefix(u.Path, "/")
	if strings.Contains(db, "/") {
		return nil, badURL("database name %q contains /", db)
	}
	cfg.DBName = db
	return cfg, nil
}

// badHostRune: what cannot appear in a host name, an IPv4 or an IPv6
// address (with a %zone); the driver's DSN would misread some of it.
func badHostRune(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	}
	return !strings.ContainsRune(".-_:%", r)
}
