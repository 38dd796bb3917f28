package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/outbox-go/outbox/source/pgcdc"

	"github.com/outbox-go/outbox/internal/wire"
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
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "outbox migrate: table %s is up to date in %s\n", f.qualifiedTable(), wire.Mask(f.db))
	if *withCDC || cdc.publication != "" || cdc.tableLess {
		return migrateCDC(ctx, e, f, cdc)
	}
	return nil
}

// migrateCDC runs pgcdc.Setup: the publication and the source's tables.
func migrateCDC(ctx context.Context, e env, f *flags, c cdcFlags) error {
	cfg, err := c.config(f).WithDefaults()
	if err != nil {
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
