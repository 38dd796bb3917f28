package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox/cmd/outbox/internal/wire"
	"github.com/outbox-go/outbox/source/pgcdc"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/mysqlstore"
	"github.com/outbox-go/outbox/store/pgstore"
	"github.com/outbox-go/outbox/store/sqlitestore"
)

func runMigrate(ctx context.Context, e env, args []string) error {
	f := newFlags(e, "migrate", "migrate --db URL [--table outbox] [--schema name] [--cdc [--publication NAME] [--table-less]]")
	withCDC := f.Bool("cdc", false, "PostgreSQL: also set up the pgcdc source (its publication and state tables)")
	var cdc cdcFlags
	cdc.register(f)
	if err := f.parse(e, args); err != nil {
		return err
	}
	if len(f.posArgs()) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", wire.ErrUsage, f.posArgs()[0])
	}
	st, err := f.openStore(ctx, f.options())
	if err != nil {
		return err
	}
	defer st.Close()
	// What the migration did is read around it: whether the table existed,
	// and the schema version before and after.
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	existed := !errors.Is(checkTable(cctx, st), store.ErrNotMigrated)
	cancel()
	before, beforeErr := schemaVersion(ctx, st, f)
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	after, afterErr := schemaVersion(ctx, st, f)
	where := wire.Mask(f.db)
	switch {
	case !existed && afterErr == nil:
		fmt.Fprintf(e.stdout, "outbox migrate: created table %s (schema version %d) in %s\n", f.qualifiedTable(), after, where)
	case !existed:
		fmt.Fprintf(e.stdout, "outbox migrate: created table %s in %s\n", f.qualifiedTable(), where)
	case beforeErr == nil && afterErr == nil && after > before:
		fmt.Fprintf(e.stdout, "outbox migrate: migrated table %s from schema version %d to %d in %s\n", f.qualifiedTable(), before, after, where)
	case afterErr == nil:
		fmt.Fprintf(e.stdout, "outbox migrate: table %s is up to date (schema version %d) in %s\n", f.qualifiedTable(), after, where)
	default:
		fmt.Fprintf(e.stdout, "outbox migrate: table %s is up to date in %s\n", f.qualifiedTable(), where)
	}
	if *withCDC || cdc.publication != "" || cdc.tableLess {
		return migrateCDC(ctx, e, f, cdc)
	}
	return nil
}

// migrateCDC runs pgcdc.Setup: the publication and the source's tables.
func migrateCDC(ctx context.Context, e env, f *flags, c cdcFlags) error {
	cfg := c.config(f).WithDefaults()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %s", wire.ErrUsage, strings.TrimPrefix(err.Error(), "pgcdc: "))
	}
	pool, err := cdcPool(ctx, f)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pgcdc.Setup(ctx, pool, cfg); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "outbox migrate: publication %s is set up for the pgcdc source\n", cfg.Publication)
	return nil
}

// schemaVersion reads the highest migration recorded in the table's
// <table>_migrations (0 when it has none).
func schemaVersion(ctx context.Context, st store.Store, f *flags) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	name := f.table + "_migrations" // checked by checkNames: [a-z0-9_] only
	var v sql.NullInt64
	var err error
	switch s := st.(type) {
	case *pgstore.Store:
		id := pgx.Identifier{name}
		if f.schema != "" {
			id = pgx.Identifier{f.schema, name}
		}
		err = s.Pool().QueryRow(ctx, "SELECT max(version) FROM "+id.Sanitize()).Scan(&v)
	case *mysqlstore.Store:
		q := "`" + name + "`"
		if f.schema != "" {
			q = "`" + f.schema + "`." + q
		}
		err = s.DB().QueryRowContext(ctx, "SELECT MAX(version) FROM "+q).Scan(&v)
	case *sqlitestore.Store:
		err = s.DB().QueryRowContext(ctx, `SELECT MAX(version) FROM "`+name+`"`).Scan(&v)
	default:
		err = errors.New("unknown store")
	}
	return int(v.Int64), err
}
