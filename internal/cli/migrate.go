package cli

import (
	"context"
	"fmt"

	"github.com/outbox-go/outbox/internal/wire"
)

func runMigrate(ctx context.Context, e env, args []string) error {
	f := newFlags(e, "migrate", "migrate --db URL [--table outbox] [--schema name]")
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
	return nil
}
