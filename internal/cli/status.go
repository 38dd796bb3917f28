package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/outbox-go/outbox/internal/wire"
	"github.com/outbox-go/outbox/store"
)

// statusJSON is the --json shape of `outbox status`; field names are stable.
type statusJSON struct {
	Table                string  `json:"table"`
	New                  int64   `json:"new"`
	Sending              int64   `json:"sending"`
	Retrying             int64   `json:"retrying"`
	Dead                 int64   `json:"dead"`
	Sent                 int64   `json:"sent_kept"`
	ExpiredLeases        int64   `json:"expired_leases"`
	BlockedKeys          int64   `json:"blocked_keys"`
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
}

func runStatus(ctx context.Context, e env, args []string) error {
	f := newFlags(e, "status", "status --db URL [--json]")
	asJSON := f.Bool("json", false, "print JSON")
	if err := f.parse(e, args); err != nil {
		return err
	}
	if len(f.posArgs()) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", wire.ErrUsage, f.posArgs()[0])
	}
	opts := f.options()
	opts.KeepSent = true // count the archive too
	st, err := f.openStore(ctx, opts)
	if err != nil {
		return err
	}
	defer st.Close()
	s, err := st.Stats(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(statusJSON{f.table, s.New, s.Sending, s.Retrying, s.Dead, s.Sent, s.ExpiredLeases, s.BlockedKeys, s.OldestPending.Seconds()})
	}
	printStatus(e, f.table, wire.Mask(f.db), s)
	return nil
}

func printStatus(e env, table, db string, s store.Stats) {
	w := e.stdout
	fmt.Fprintf(w, "outbox status: table %s in %s\n", table, db)
	fmt.Fprintf(w, "  pending         %d (new %d, sending %d)\n", s.Pending(), s.New, s.Sending)
	fmt.Fprintf(w, "  retrying        %d\n", s.Retrying)
	fmt.Fprintf(w, "  expired leases  %d\n", s.ExpiredLeases)
	fmt.Fprintf(w, "  dead            %d\n", s.Dead)
	fmt.Fprintf(w, "  blocked keys    %d\n", s.BlockedKeys)
	fmt.Fprintf(w, "  sent (kept)     %d\n", s.Sent)
	fmt.Fprintf(w, "  oldest pending  %s\n", s.OldestPending.Round(time.Millisecond))
	switch {
	case s.BlockedKeys > 0:
		fmt.Fprintf(w, "attention: %d key(s) held by dead events: inspect with `outbox dead list`, then `outbox dead retry`\n", s.BlockedKeys)
	case s.Dead > 0:
		fmt.Fprintf(w, "attention: %d dead event(s): `outbox dead list`\n", s.Dead)
	case s.ExpiredLeases > 0:
		fmt.Fprintln(w, "attention: claims with expired leases: a relay died or stalled; another relay will take them")
	}
}
