// Package wire turns the CLI's --db and --broker URLs into concrete stores
// and brokers. It is the one place that imports every backend, so that the
// library packages never do.
package wire

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/internal/redact"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/mysqlstore"
	"github.com/outbox-go/outbox/store/pgstore"
	"github.com/outbox-go/outbox/store/sqlitestore"
)

// ErrUsage marks errors in what the user typed (exit code 2).
var ErrUsage = errors.New("usage")

// DBSchemes lists the --db URL forms.
const DBSchemes = "postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db, sqlite:path/to/file.db"

// BrokerSchemes lists the --broker URL forms built in (see brokers.go).
const BrokerSchemes = brokerForms

// OpenStore opens the store a --db URL names. Its errors never show the
// URL's secrets: its own messages mask the URL, the drivers' are scrubbed.
func OpenStore(ctx context.Context, raw string, opts store.Options) (driver.Store, error) {
	if raw == "" {
		return nil, WithHint(fmt.Errorf("%w: no database given: pass --db URL or set OUTBOX_DB", ErrUsage), " ("+DBSchemes+")")
	}
	scheme, _, ok := strings.Cut(raw, ":")
	if !ok {
		return nil, WithHint(fmt.Errorf("%w: database URL %q has no scheme; use one of", ErrUsage, Mask(raw)), ": "+DBSchemes)
	}
	var (
		st  driver.Store
		err error
	)
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		if err := checkUserinfo("database", raw, libpqUserinfo); err != nil {
			return nil, err
		}
		st, err = pgstore.Open(ctx, raw, pgstore.Config{Options: opts})
	case "mysql", "mariadb":
		if err := checkUserinfo("database", raw, goUserinfo); err != nil {
			return nil, err
		}
		st, err = mysqlstore.Open(ctx, raw, mysqlstore.Config{Options: opts})
	case "sqlite", "sqlite3", "file":
		// sqlitestore has no sentinel for its URL errors: parse first, so
		// that a malformed URL is told apart from a file it cannot open.
		if _, err := sqlitestore.DSN(raw); err != nil {
			return nil, ScrubError(fmt.Errorf("%w: %w", ErrUsage, err), raw)
		}
		st, err = sqlitestore.Open(ctx, raw, sqlitestore.Config{Options: opts})
	default:
		return nil, WithHint(fmt.Errorf("%w: unknown database scheme %q; use one of", ErrUsage, Mask(scheme)), ": "+DBSchemes)
	}
	if errors.Is(err, pgstore.ErrBadURL) || errors.Is(err, mysqlstore.ErrBadURL) || errors.Is(err, store.ErrRefused) {
		// A URL that cannot be parsed, or that the database refused (the
		// login, a missing database), is the operator's to fix (exit 2):
		// waiting for the database would never end.
		err = fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if err != nil {
		return nil, ScrubError(err, raw)
	}
	return st, nil
}

// OpenBroker connects to the broker a --broker URL names. Its errors never
// show the URL's secrets: its own messages mask the URL, the adapter's are
// scrubbed.
func OpenBroker(ctx context.Context, raw string) (broker.Broker, error) {
	if raw == "" {
		return nil, WithHint(fmt.Errorf("%w: no broker given: pass --broker URL or set OUTBOX_BROKER", ErrUsage), " ("+BrokerSchemes+")")
	}
	u, err := url.Parse(raw)
	if err != nil && strings.Contains(raw, "://") {
		// Most often a password with an unencoded reserved character:
		// say so rather than "not a URL".
		for _, one := range strings.Split(raw, ",") {
			if err := checkUserinfo("broker", strings.TrimSpace(one), goUserinfo); err != nil {
				return nil, err
			}
		}
	}
	if err != nil || u.Scheme == "" {
		return nil, WithHint(fmt.Errorf("%w: broker URL %q is not a URL; use one of", ErrUsage, Mask(raw)), ": "+BrokerSchemes)
	}
	scheme := strings.ToLower(u.Scheme)
	for _, a := range brokerAdapters {
		for _, sc := range a.schemes {
			if sc == scheme {
				b, err := a.open(ctx, raw, u)
				if errors.Is(err, broker.ErrRefused) && !errors.Is(err, ErrUsage) {
					// the broker answered and refused the URL's login:
					// the operator's to fix (exit 2), not worth waiting for
					err = fmt.Errorf("%w: %w", ErrUsage, err)
				}
				if err != nil {
					return nil, ScrubError(err, raw)
				}
				return b, nil
			}
		}
	}
	return nil, WithHint(fmt.Errorf("%w: unknown broker scheme %q; use one of", ErrUsage, u.Scheme), ": "+BrokerSchemes)
}

// Mask hides the secrets of a URL or DSN (passwords, tokens, secret query
// parameters and keywords), for logs and errors; see internal/redact.
func Mask(raw string) string { return redact.URL(raw) }

// ScrubError returns err with the secrets in its message masked: those of
// any URL, DSN or password=… pair it contains, and those of the connection
// strings raws where they stand whole in a secret position. It unwraps to
// err, so errors.Is(err, ErrUsage) still holds; nil stays nil. The hint of
// an error made by WithHint is kept as written.
func ScrubError(err error, raws ...string) error {
	if h, ok := err.(*hinted); ok {
		return &hinted{err: redact.Error(h.err, raws...), hint: h.hint}
	}
	return redact.Error(err, raws...)
}

// WithHint returns err followed by hint, a text of the program's own
// (example URLs such as amqp://user:pass@host, which the masker would
// otherwise take for secrets), which ScrubError leaves as written.
func WithHint(err error, hint string) error { return &hinted{err: err, hint: hint} }

type hinted struct {
	err  error
	hint string
}

func (h *hinted) Error() string { return h.err.Error() + h.hint }
func (h *hinted) Unwrap() error { return h.err }

// checkUserinfo refuses a URL whose userinfo the driver would end at
// another '@' than redact does (an unencoded @, /, ? or # in the
// password): the driver would then show a piece of the password as a host
// or port in its errors, where nothing can recognize it as a secret.
func checkUserinfo(what, raw string, driver func(rest string) (string, bool)) error {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil
	}
	ours, have := redact.Userinfo(raw)
	theirs, they := driver(rest)
	if have == they && ours == theirs {
		return nil
	}
	return fmt.Errorf("%w: the password in the %s URL %s holds a character that ends a URL's password (@ / ? or #): percent-encode it (@ as %%40, / as %%2F, ? as %%3F, # as %%23)", ErrUsage, what, Mask(raw))
}

// libpqUserinfo is where pgx, like libpq, ends a URL's userinfo: at the
// first '@', if no '/' comes before it.
func libpqUserinfo(rest string) (string, bool) {
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		return rest[:i], true
	}
	return "", false
}

// goUserinfo is where net/url (go-sql-driver's URL form here, nats.go)
// ends it: at the last '@' before the first '#', '?' or '/'.
func goUserinfo(rest string) (string, bool) {
	if i := strings.IndexAny(rest, "#?/"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		return rest[:i], true
	}
	return "", false
}

// SQLDB opens a --db URL through database/sql with the driver its store
// expects, and names the dialect: "postgres", "mysql" or "sqlite". Its
// errors never show the URL's secrets; errors of the *sql.DB's own calls
// may (pass them through ScrubError).
func SQLDB(raw string) (*sql.DB, string, error) {
	scheme, _, _ := strings.Cut(raw, ":")
	var driver, dsn, dialect string
	var err error
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		if err := checkUserinfo("database", raw, libpqUserinfo); err != nil {
			return nil, "", err
		}
		if _, err := pgconn.ParseConfig(raw); err != nil { // sql.Open would parse it only at the first connection
			return nil, "", ScrubError(fmt.Errorf("%w: %w: %w", ErrUsage, pgstore.ErrBadURL, err), raw)
		}
		driver, dsn, dialect = "pgx", raw, "postgres"
	case "mysql", "mariadb":
		if err := checkUserinfo("database", raw, goUserinfo); err != nil {
			return nil, "", err
		}
		driver, dialect = "mysql", "mysql"
		dsn, err = mysqlstore.DSN(raw)
	case "sqlite", "sqlite3", "file":
		driver, dialect = "sqlite", "sqlite"
		dsn, err = sqlitestore.DSN(raw)
	default:
		return nil, "", WithHint(fmt.Errorf("%w: unknown database scheme %q; use one of", ErrUsage, Mask(scheme)), ": "+DBSchemes)
	}
	if err != nil {
		return nil, "", ScrubError(fmt.Errorf("%w: %v", ErrUsage, err), raw)
	}
	db, err := sql.Open(driver, dsn)
	return db, dialect, ScrubError(err, dsn)
}
