package binlog_test

import (
	"context"
	"database/sql"
	"testing"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/source"
	"github.com/outbox-go/outbox/source/binlog"
	"github.com/outbox-go/outbox/source/sourcetest"
	"github.com/outbox-go/outbox/store"
)

// conformance is the source conformance suite's view of a fixture.
type conformance struct{ f *fixture }

func (c conformance) Open(t testing.TB) source.Source { return c.f.start(t, c.f.cfg) }

func (c conformance) Close(t testing.TB, s source.Source) {
	if err := s.(*binlog.Source).Close(); err != nil {
		t.Fatal(err)
	}
}

func (c conformance) Begin(t testing.TB) sourcetest.Tx {
	t.Helper()
	tx, err := c.f.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return sqlTx{c: c, tx: tx}
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
	c.f.exec("UPDATE `" + c.f.cfg.Table + "_binlog` SET owner = 'sourcetest-successor', epoch = epoch + 1, lease_until = NOW(6) + INTERVAL 1 HOUR")
}

type sqlTx struct {
	c  conformance
	tx *sql.Tx
}

func (p sqlTx) Write(t testing.TB, msgs ...outbox.Message) {
	t.Helper()
	if err := p.c.f.store.EnqueueTx(context.Background(), p.tx, msgs...); err != nil {
		t.Fatal(err)
	}
}

func (p sqlTx) Commit(t testing.TB) {
	t.Helper()
	if err := p.tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func (p sqlTx) Rollback(t testing.TB) {
	t.Helper()
	if err := p.tx.Rollback(); err != nil {
		t.Fatal(err)
	}
}

func TestSourceConformance(t *testing.T) {
	sourcetest.Run(t, sourcetest.Suite{CommitOrder: true, New: func(t *testing.T) sourcetest.Fixture {
		return conformance{newFixture(t)}
	}})
}
