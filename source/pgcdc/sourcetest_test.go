package pgcdc_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/source"
	"github.com/outbox-go/outbox/source/pgcdc"
	"github.com/outbox-go/outbox/source/sourcetest"
	"github.com/outbox-go/outbox/store"
)

// conformance is the source conformance suite's view of a fixture.
type conformance struct{ f *fixture }

func (c conformance) Open(t testing.TB) source.Source {
	t.Helper()
	src, err := pgcdc.New(c.f.pool, c.f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

func (c conformance) Close(t testing.TB, s source.Source) {
	if err := s.(*pgcdc.Source).Close(); err != nil {
		t.Fatal(err)
	}
}

func (c conformance) Begin(t testing.TB) sourcetest.Tx {
	t.Helper()
	tx, err := c.f.pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return pgTx{c: c, tx: tx}
}

func (c conformance) Dead(t testing.TB) []sourcetest.Dead {
	t.Helper()
	recs, err := c.f.store.ListDead(context.Background(), store.DeadQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]sourcetest.Dead, len(recs))
	for i, r := range recs {
		out[i] = sourcetest.Dead{EventID: r.EventID, Reason: r.LastError}
	}
	return out
}

// Takeover does what a successor does once the lease expired: it takes the
// lease row under a new epoch.
func (c conformance) Takeover(t testing.TB, _ source.Source) {
	t.Helper()
	c.f.exec("UPDATE " + pgx.Identifier{c.f.cfg.Table + "_cdc"}.Sanitize() + " SET owner = 'sourcetest-successor', epoch = epoch + 1, lease_until = now() + interval '1 hour'")
}

type pgTx struct {
	c  conformance
	tx pgx.Tx
}

func (p pgTx) Write(t testing.TB, msgs ...outbox.Message) {
	t.Helper()
	var err error
	if p.c.f.cfg.TableLess {
		err = pgcdc.Emitter{Prefix: p.c.f.cfg.Prefix}.Enqueue(context.Background(), p.tx, msgs...)
	} else {
		err = p.c.f.store.EnqueuePgxTx(context.Background(), p.tx, msgs...)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func (p pgTx) Commit(t testing.TB) {
	t.Helper()
	if err := p.tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (p pgTx) Rollback(t testing.TB) {
	t.Helper()
	if err := p.tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestSourceConformanceTable(t *testing.T) {
	sourcetest.Run(t, sourcetest.Suite{CommitOrder: true, New: func(t *testing.T) sourcetest.Fixture {
		return conformance{newFixture(t, false)}
	}})
}

func TestSourceConformanceTableLess(t *testing.T) {
	sourcetest.Run(t, sourcetest.Suite{CommitOrder: true, New: func(t *testing.T) sourcetest.Fixture {
		return conformance{newFixture(t, true)}
	}})
}
