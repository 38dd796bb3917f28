package binlog_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/source"
	"github.com/outbox-go/outbox/source/binlog"
)

// reasons records the fallbacks' reasons of a source.
type reasons struct {
	mu  sync.Mutex
	got []string
}

func (r *reasons) add(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, reason)
}

func (r *reasons) has(t *testing.T, part string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.got {
		if strings.Contains(g, part) {
			return
		}
	}
	t.Fatalf("no fallback for %q; the fallbacks' reasons: %q", part, r.got)
}

// The saved position is purged while the source is down: the next source
// cannot stream from it, reads the table instead and delivers what was
// written meanwhile, then streams on.
func TestPurgedWhileDown(t *testing.T) {
	f := newFixture(t)
	src := f.start(t, f.cfg)
	first, _ := produce(t, f, 3, nil)
	collect(src).until(t, 30*time.Second, first...)
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	down, _ := produce(t, f, 5, nil)
	f.purgeSaved(t)

	var why reasons
	cfg := f.cfg
	cfg.OnFallback = why.add
	src = f.start(t, cfg)
	if lag, err := src.Lag(context.Background()); err != nil || lag <= 0 {
		t.Fatalf("Lag with the saved position purged: %d, %v; want every binlog byte since", lag, err)
	}
	c := collect(src)
	c.until(t, 30*time.Second, down...)
	why.has(t, "cannot stream from the saved position")
	for _, id := range first {
		if c.seen[id] > 0 {
			t.Fatal("an event acknowledged before the restart was delivered again")
		}
	}
	after, _ := produce(t, f, 3, nil)
	c.until(t, 30*time.Second, after...)
	if n := src.Fallbacks(); n != 1 {
		t.Fatalf("%d fallbacks; want 1", n)
	}
}

// A session that writes the outbox with binlog_format STATEMENT leaves no
// rows in the log: the source sees the statement, reads the table, and
// delivers the event; later row-format writes stream as before.
func TestStatementFormatSession(t *testing.T) {
	f := newFixture(t)
	var why reasons
	cfg := f.cfg
	cfg.OnFallback = why.add
	src := f.start(t, cfg)
	c := collect(src)
	before, _ := produce(t, f, 2, nil)
	c.until(t, 30*time.Second, before...)

	ctx := context.Background()
	conn, err := f.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION binlog_format = 'STATEMENT'"); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := outbox.Message{EventID: outbox.NewEventID(), Topic: "t", Key: "k", Type: "Statement", Payload: []byte("s")}
	if err := f.store.EnqueueTx(ctx, tx, m); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	c.until(t, 30*time.Second, m.EventID)
	why.has(t, "statement-format write to the outbox table")
	after, _ := produce(t, f, 2, nil)
	c.until(t, 30*time.Second, after...)
	waitFor(t, "every delivered row deleted", 30*time.Second, func() bool { return f.count("true") == 0 })
}

// A change of the table's definition (a column added) makes the source
// read the table again; rows written after it stream, mapped by name.
func TestTableAltered(t *testing.T) {
	f := newFixture(t)
	var why reasons
	cfg := f.cfg
	cfg.OnFallback = why.add
	src := f.start(t, cfg)
	c := collect(src)
	f.exec("ALTER TABLE `" + f.cfg.Table + "` ADD COLUMN note VARCHAR(20) NULL AFTER id")
	after, _ := produce(t, f, 3, nil)
	c.until(t, 30*time.Second, after...)
	why.has(t, "definition changed")
	c.inOrder(t, after)
}

// Two sources on one table: the second waits for the lease; the streamer
// crashes (its lease is left to expire), the second takes over and
// delivers what the first had not acknowledged; the first's writes are
// refused.
func TestTakeover(t *testing.T) {
	f := newFixture(t)
	a := f.start(t, f.cfg)
	bc := make(chan any, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				bc <- r
			}
		}()
		src, err := binlog.New(f.db, f.conn, f.cfg)
		if err != nil {
			bc <- err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := src.Start(ctx); err != nil {
			bc <- err
			return
		}
		bc <- src
	}()
	ca := collect(a)
	acked, _ := produce(t, f, 3, nil)
	ca.until(t, 30*time.Second, acked...)
	held, _ := produce(t, f, 3, nil)
	// read, not acknowledged: a crash now leaves them to the successor
	var got []outbox.Event
	var pos source.Position
	for len(got) < len(held) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		txns, err := a.Next(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, tx := range txns {
			got = append(got, tx.Events...)
			pos = max(pos, tx.Pos)
		}
	}
	select {
	case r := <-bc:
		t.Fatalf("the second source started while the first held the lease: %v", r)
	default:
	}
	a.Crash()
	select {
	case r := <-bc:
		src, ok := r.(*binlog.Source)
		if !ok {
			t.Fatalf("the second source did not start: %v", r)
		}
		t.Cleanup(func() { src.Close() })
		cb := collect(src)
		cb.until(t, 30*time.Second, held...)
		for _, id := range acked {
			if cb.seen[id] > 0 {
				t.Fatal("the successor delivered an event the first source had acknowledged")
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the second source did not take over within 30s of the first one's crash")
	}
	if err := a.Bury(context.Background(), []source.Burial{{Event: got[0], Reason: "stale"}}); !errors.Is(err, source.ErrFenced) {
		t.Fatalf("the crashed source's Bury after the takeover: %v; want source.ErrFenced", err)
	}
	if err := a.Ack(context.Background(), pos); !errors.Is(err, source.ErrFenced) {
		t.Fatalf("the crashed source's Ack after the takeover: %v; want source.ErrFenced", err)
	}
	if n := f.count("status = 'DEAD'"); n != 0 {
		t.Fatalf("%d rows DEAD after a fenced Bury", n)
	}
}

// purgeSaved purges the binlog files up to and including the one the
// source's saved position is in. The server keeps a file while crash
// recovery may need it (until its binlog checkpoint), so it retries.
func (f *fixture) purgeSaved(t *testing.T) {
	t.Helper()
	var saved string
	if err := f.db.QueryRow("SELECT file FROM `" + f.cfg.Table + "_binlog`").Scan(&saved); err != nil || saved == "" {
		t.Fatalf("no saved position (%v)", err)
	}
	waitFor(t, "the saved position's binlog file purged", 30*time.Second, func() bool {
		f.exec("FLUSH BINARY LOGS")
		var file string
		var pos int64
		var doDB, ignoreDB any
		if err := f.db.QueryRow("SHOW MASTER STATUS").Scan(&file, &pos, &doDB, &ignoreDB); err != nil {
			t.Fatal(err)
		}
		f.exec("PURGE BINARY LOGS TO '" + file + "'")
		var oldest string
		var size int64
		if err := f.db.QueryRow("SHOW BINARY LOGS").Scan(&oldest, &size); err != nil {
			t.Fatal(err)
		}
		return oldest > saved
	})
}

// XA transactions: MariaDB logs a prepared one's rows at XA PREPARE and
// its XA COMMIT apart; the rows are delivered once it committed (the
// source reads the table then), a prepared one rolled back never, and a
// one-phase commit streams as any transaction.
func TestXATransaction(t *testing.T) {
	f := newFixture(t)
	var why reasons
	cfg := f.cfg
	cfg.OnFallback = why.add
	src := f.start(t, cfg)
	c := collect(src)
	ctx := context.Background()
	session := func() func(stmts ...any) {
		t.Helper()
		conn, err := f.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		// run runs statements, and inserts each outbox.Message given
		return func(stmts ...any) {
			t.Helper()
			for _, s := range stmts {
				var err error
				switch s := s.(type) {
				case string:
					_, err = conn.ExecContext(ctx, s)
				case outbox.Message:
					_, err = conn.ExecContext(ctx, "INSERT INTO `"+f.cfg.Table+"` (event_id, topic, event_type, payload) VALUES (?, 't', 'XA', ?)", s.EventID, s.Payload)
				}
				if err != nil {
					t.Fatalf("%v: %v", s, err)
				}
			}
		}
	}
	two := outbox.Message{EventID: outbox.NewEventID(), Payload: []byte("two-phase")}
	rolled := outbox.Message{EventID: outbox.NewEventID(), Payload: []byte("rolled-back")}
	one := outbox.Message{EventID: outbox.NewEventID(), Payload: []byte("one-phase")}
	x := strings.TrimPrefix(f.cfg.Table, "bl") // xids of this test's own
	t.Cleanup(func() {
		for _, id := range []string{"two", "rolled", "one"} {
			_, _ = f.db.Exec("XA ROLLBACK 'bl-" + x + "-" + id + "'") // one left prepared by a failure
		}
	})
	a := session()
	a("XA START 'bl-"+x+"-two'", two, "XA END 'bl-"+x+"-two'", "XA PREPARE 'bl-"+x+"-two'")
	session()("XA START 'bl-"+x+"-rolled'", rolled, "XA END 'bl-"+x+"-rolled'", "XA PREPARE 'bl-"+x+"-rolled'", "XA ROLLBACK 'bl-"+x+"-rolled'")
	marker, _ := produce(t, f, 1, nil)
	c.until(t, 30*time.Second, marker...)
	if c.seen[two.EventID] > 0 {
		t.Fatal("a prepared XA transaction's event was delivered before it committed")
	}
	a("XA COMMIT 'bl-" + x + "-two'")
	c.until(t, 30*time.Second, two.EventID)
	why.has(t, "XA transaction that wrote the outbox table committed")
	session()("XA START 'bl-"+x+"-one'", one, "XA END 'bl-"+x+"-one'", "XA COMMIT 'bl-"+x+"-one' ONE PHASE")
	c.until(t, 30*time.Second, one.EventID)
	if c.seen[rolled.EventID] > 0 {
		t.Fatal("a rolled-back XA transaction's event was delivered")
	}

	// prepared, streamed past and acknowledged past, then the source
	// restarts: the new stream never saw the prepare, and its commit
	// alone makes the source read the table
	late := outbox.Message{EventID: outbox.NewEventID(), Payload: []byte("across-a-restart")}
	b := session()
	b("XA START 'bl-"+x+"-late'", late, "XA END 'bl-"+x+"-late'", "XA PREPARE 'bl-"+x+"-late'")
	t.Cleanup(func() { _, _ = f.db.Exec("XA ROLLBACK 'bl-" + x + "-late'") })
	marker, _ = produce(t, f, 1, nil)
	c.until(t, 30*time.Second, marker...)
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	src = f.start(t, cfg)
	c = collect(src)
	b("XA COMMIT 'bl-" + x + "-late'")
	c.until(t, 30*time.Second, late.EventID)
	why.has(t, "prepared before the stream started")
}

// The saved GTID position is not in the server's history (as after a
// failover to a server whose history diverged): strict mode refuses it,
// and the source reads the table instead.
func TestGTIDDiverged(t *testing.T) {
	f := newFixture(t)
	src := f.start(t, f.cfg)
	first, _ := produce(t, f, 2, nil)
	collect(src).until(t, 30*time.Second, first...)
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	f.exec("UPDATE `" + f.cfg.Table + "_binlog` SET gtid = '0-4242-999999999'")
	down, _ := produce(t, f, 2, nil)
	var why reasons
	cfg := f.cfg
	cfg.OnFallback = why.add
	src = f.start(t, cfg)
	collect(src).until(t, 30*time.Second, down...)
	why.has(t, "cannot stream from the saved position")
}
