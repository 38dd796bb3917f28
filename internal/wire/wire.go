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
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/broker/natsbroker"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/mysqlstore"
	"github.com/outbox-go/outbox/store/pgstore"
	"github.com/outbox-go/outbox/store/sqlitestore"
)

// ErrUsage marks errors in what the user typed (exit code 2).
var ErrUsage = errors.New("usage")

// DBSchemes lists the --db URL forms.
const DBSchemes = "postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db, sqlite:path/to/file.db"

// BrokerSchemes lists the --broker URL forms built in.
const BrokerSchemes = "nats://host:4222"

// OpenStore opens the store a --db URL names.
func OpenStore(ctx context.Context, raw string, opts store.Options) (store.Store, error) {
	if raw == "" {
		return nil, fmt.Errorf("%w: no database given: pass --db URL or set OUTBOX_DB (%s)", ErrUsage, DBSchemes)
	}
	scheme, _, ok := strings.Cut(raw, ":")
	if !ok {
		return nil, fmt.Errorf("%w: database URL %q has no scheme; use one of: %s", ErrUsage, Mask(raw), DBSchemes)
	}
	var (
		st  store.Store
		err error
	)
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		st, err = pgstore.Open(ctx, raw, pgstore.Config{Options: opts})
	case "mysql", "mariadb":
		st, err = mysqlstore.Open(ctx, raw, mysqlstore.Config{Options: opts})
	case "sqlite", "sqlite3", "file":
		st, err = sqlitestore.Open(ctx, raw, sqlitestore.Config{Options: opts})
	default:
		return nil, fmt.Errorf("%w: unknown database scheme %q; use one of: %s", ErrUsage, scheme, DBSchemes)
	}
	if err != nil {
		return nil, scrub(err, raw)
	}
	return st, nil
}

// OpenBroker connects to the broker a --broker URL names.
func OpenBroker(ctx context.Context, raw string) (broker.Broker, error) {
	if raw == "" {
		return nil, fmt.Errorf("%w: no broker given: pass --broker URL or set OUTBOX_BROKER (%s)", ErrUsage, BrokerSchemes)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("%w: broker URL %q is not a URL; use one of: %s", ErrUsage, Mask(raw), BrokerSchemes)
	}
	switch strings.ToLower(u.Scheme) {
	case "nats", "tls":
		b, err := natsbroker.Dial(raw, natsbroker.Config{})
		if err != nil {
			return nil, scrub(err, raw)
		}
		return b, nil
	case "kafka", "amqp", "amqps", "redis", "rediss", "mqtt", "mqtts", "http", "https", "rocketmq":
		return nil, fmt.Errorf("%w: the %s broker adapter is not built into this version yet; built in: %s", ErrUsage, u.Scheme, BrokerSchemes)
	default:
		return nil, fmt.Errorf("%w: unknown broker scheme %q; use one of: %s", ErrUsage, u.Scheme, BrokerSchemes)
	}
}

// Mask hides the password in a URL, for logs and errors.
func Mask(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); !ok {
		return raw
	}
	u.User = url.UserPassword(u.User.Username(), "xxxxx")
	return u.String()
}

// scrub removes a password that a driver may have echoed into err.
func scrub(err error, raw string) error {
	u, perr := url.Parse(raw)
	if perr != nil || u.User == nil {
		return err
	}
	pw, ok := u.User.Password()
	if !ok || pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
}

// SQLDB opens a --db URL through database/sql with the driver its store
// expects, and names the dialect: "postgres", "mysql" or "sqlite".
func SQLDB(raw string) (*sql.DB, string, error) {
	scheme, _, _ := strings.Cut(raw, ":")
	var driver, dsn, dialect string
	var err error
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		driver, dsn, dialect = "pgx", raw, "postgres"
	case "mysql", "mariadb":
		driver, dialect = "mysql", "mysql"
		dsn, err = mysqlstore.DSN(raw)
	case "sqlite", "sqlite3", "file":
		driver, dialect = "sqlite", "sqlite"
		dsn, err = sqlitestore.DSN(raw)
	default:
		return nil, "", fmt.Errorf("%w: unknown database scheme %q; use one of: %s", ErrUsage, scheme, DBSchemes)
	}
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrUsage, err)
	}
	db, err := sql.Open(driver, dsn)
	return db, dialect, err
}
