package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/source/pgcdc"
	"github.com/outbox-go/outbox/store"
	"github.com/outbox-go/outbox/store/driver"
	"github.com/outbox-go/outbox/store/pgstore"
)

// EnqueueConfig says what the enqueue-overhead scenario measures: what one
// outbox row adds to a producer's business transaction, each form of
// writing it against the same transaction alone, at several writer counts.
type EnqueueConfig struct {
	DBURL string
	// Writers are the concurrent producers, one run per value; default 1,
	// 8 and 32.
	Writers []int
	// Transactions is how many transactions each form commits in one
	// round; default 2,000.
	Transactions int
	// Rounds is how often the forms take turns (in a rotating order, so
	// that drift in the machine's load hits all alike); default 5.
	Rounds  int
	Payload int // payload bytes; default 200
	Out     io.Writer
	// OpenStore and SQLDB open the database, as in Config.
	OpenStore func(ctx context.Context, url string, opts store.Options) (driver.Store, error)
	SQLDB     func(url string) (*sql.DB, string, error)
}

// EnqueueRow is one form at one writer count.
type EnqueueRow struct {
	Writers int    `json:"writers"`
	Form    string `json:"form"`
	// Limit marks the business transaction alone, the row the others are
	// read against.
	Limit bool `json:"limit,omitempty"`
	// InRoundTrip says the form adds no round trip to the caller's
	// transaction (the target, ≤ 25 % at 8 writers, is for these).
	InRoundTrip bool `json:"in_round_trip"`
	// TxPerSec is the median over the rounds of committed transactions
	// per second.
	TxPerSec float64 `json:"tx_per_sec"`
	// Overhead is the median over the rounds of the time the form took
	// over the business transaction alone in the same round, in percent
	// (0 for the business transaction itself); OverheadMin and
	// OverheadMax its spread.
	Overhead    float64 `json:"overhead_pct"`
	OverheadMin float64 `json:"overhead_min_pct"`
	OverheadMax float64 `json:"overhead_max_pct"`
}

// enqueueForm is one way a producer commits its business row, with or
// without the outbox row.
type enqueueForm struct {
	name        string
	inRoundTrip bool
	tableRow    bool // writes a row of the outbox table (checked after the run)
	tx          func(ctx context.Context, i int64) error
}

// WithDefaults returns c with the default in every zero field.
func (c EnqueueConfig) WithDefaults() EnqueueConfig {
	if len(c.Writers) == 0 {
		c.Writers = []int{1, 8, 32}
	}
	if c.Transactions <= 0 {
		c.Transactions = 2000
	}
	if c.Rounds <= 0 {
		c.Rounds = 5
	}
	if c.Payload <= 0 {
		c.Payload = 200
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	return c
}

// RunEnqueue measures the enqueue overhead on fresh tables (the outbox
// table and a business table beside it), removing both afterwards, and
// prints a table per writer count.
func RunEnqueue(ctx context.Context, c EnqueueConfig) ([]EnqueueRow, error) {
	c = c.WithDefaults()
	if c.OpenStore == nil || c.SQLDB == nil {
		return nil, errors.New("bench: OpenStore and SQLDB are required")
	}
	for _, w := range c.Writers {
		if w < 1 {
			return nil, fmt.Errorf("bench: writer counts must be at least 1, not %d", w)
		}
	}
	table := fmt.Sprintf("outbox_bench_%d", time.Now().UnixNano()%1_000_000_000)
	orders := table + "_orders"
	sc, err := openScratch(ctx, c.DBURL, store.Options{Table: table}, c.OpenStore, c.SQLDB, orders)
	if err != nil {
		return nil, err
	}
	defer sc.close()
	st, db, dialect := sc.st, sc.db, sc.dialect
	if _, err := db.ExecContext(ctx, ordersDDL(dialect, orders)); err != nil {
		return nil, fmt.Errorf("bench: creating the business table: %w", err)
	}
	payload := payloadOf(c.Payload)
	msg := func(i int64) outbox.Message {
		return outbox.Message{Topic: "orders", Key: fmt.Sprintf("order-%d", i), Type: "OrderPaid", Payload: payload}
	}
	var rows []EnqueueRow
	written := 0 // outbox rows the forms committed, checked against the table
	for _, w := range c.Writers {
		forms, closeForms, err := enqueueForms(ctx, c, st, db, dialect, orders, w, msg)
		if err != nil {
			return rows, err
		}
		fmt.Fprintf(c.Out, "bench: enqueue overhead, %s, %s, %d rounds of %d transactions per form …\n", dialectName(dialect), plural(w, "writer"), c.Rounds, c.Transactions)
		took := make([][]time.Duration, len(forms))
		for round := 0; round < c.Rounds; round++ {
			for k := range forms {
				f := (round + k) % len(forms) // rotate who goes first
				d, err := runProducers(ctx, w, c.Transactions, forms[f].tx)
				if err != nil {
					closeForms()
					return rows, fmt.Errorf("bench: enqueue overhead, %s: %w", forms[f].name, err)
				}
				took[f] = append(took[f], d)
				if forms[f].tableRow {
					written += c.Transactions
				}
			}
		}
		closeForms()
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
			return rows, err
		}
		if n != written {
			return rows, fmt.Errorf("bench: enqueue overhead: the outbox table holds %d rows where the forms committed %d", n, written)
		}
		for f, form := range forms {
			row := EnqueueRow{Writers: w, Form: form.name, InRoundTrip: form.inRoundTrip, Limit: f == 0}
			rates, over := make([]float64, c.Rounds), make([]float64, c.Rounds)
			for r := range rates {
				rates[r] = float64(c.Transactions) / took[f][r].Seconds()
				over[r] = 100 * (took[f][r].Seconds()/took[0][r].Seconds() - 1)
			}
			row.TxPerSec = median(rates)
			if f > 0 {
				row.Overhead, row.OverheadMin, row.OverheadMax = median(over), minOf(over), maxOf(over)
			}
			rows = append(rows, row)
		}
	}
	writeEnqueueTable(c.Out, dialect, rows)
	return rows, nil
}

// enqueueForms returns the forms this database offers a producer, the
// business transaction alone first; close releases their connections.
func enqueueForms(ctx context.Context, c EnqueueConfig, st driver.Store, db *sql.DB, dialect, orders string, writers int, msg func(int64) outbox.Message) ([]enqueueForm, func(), error) {
	insertOrder := "INSERT INTO " + orders + " (customer, amount_cents, status) VALUES (?, ?, 'PAID')"
	if dialect != "postgres" {
		// database/sql: the form a MySQL/MariaDB or SQLite producer has.
		db.SetMaxOpenConns(writers)
		db.SetMaxIdleConns(writers)
		sqlTx := func(ctx context.Context, with func(tx *sql.Tx) error) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, insertOrder, "c-7", 1999); err != nil {
				tx.Rollback()
				return err
			}
			if with != nil {
				if err := with(tx); err != nil {
					tx.Rollback()
					return err
				}
			}
			return tx.Commit()
		}
		return []enqueueForm{
			{name: "business transaction alone (database/sql)", inRoundTrip: true, tableRow: false, tx: func(ctx context.Context, _ int64) error { return sqlTx(ctx, nil) }},
			{name: "+ outbox row, own statement (EnqueueTx)", inRoundTrip: false, tableRow: true, tx: func(ctx context.Context, i int64) error {
				return sqlTx(ctx, func(tx *sql.Tx) error { return st.EnqueueTx(ctx, tx, msg(i)) })
			}},
		}, func() {}, nil
	}
	pg, ok := st.(*pgstore.Store)
	if !ok {
		return nil, nil, fmt.Errorf("bench: a PostgreSQL store is %T, not *pgstore.Store", st)
	}
	cfg, err := pgxpool.ParseConfig(c.DBURL)
	if err != nil {
		return nil, nil, err
	}
	cfg.MaxConns, cfg.MinConns = int32(writers), int32(writers)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	insertOrder = "INSERT INTO " + orders + " (customer, amount_cents, status) VALUES ($1, $2, 'PAID')"
	pgTx := func(ctx context.Context, with func(tx pgx.Tx) error) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, insertOrder, "c-7", 1999); err != nil {
				return err
			}
			if with == nil {
				return nil
			}
			return with(tx)
		})
	}
	return []enqueueForm{
		{name: "business transaction alone (pgx)", inRoundTrip: true, tableRow: false, tx: func(ctx context.Context, _ int64) error { return pgTx(ctx, nil) }},
		{name: "+ outbox row, own statement (EnqueuePgxTx)", inRoundTrip: false, tableRow: true, tx: func(ctx context.Context, i int64) error {
			return pgTx(ctx, func(tx pgx.Tx) error { return pg.EnqueuePgxTx(ctx, tx, msg(i)) })
		}},
		{name: "+ outbox row in the caller's batch (EnqueueInBatch)", inRoundTrip: true, tableRow: true, tx: func(ctx context.Context, i int64) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				b := &pgx.Batch{}
				b.Queue(insertOrder, "c-7", 1999)
				if err := pg.EnqueueInBatch(b, msg(i)); err != nil {
					return err
				}
				return tx.SendBatch(ctx, b).Close()
			})
		}},
		{name: "+ table-less event, own statement (pgcdc.EnqueueMessage)", inRoundTrip: false, tableRow: false, tx: func(ctx context.Context, i int64) error {
			return pgTx(ctx, func(tx pgx.Tx) error { return pgcdc.EnqueueMessage(ctx, tx, msg(i)) })
		}},
	}, pool.Close, nil
}

// runProducers commits n transactions from writers goroutines and returns
// how long they took.
func runProducers(ctx context.Context, writers, n int, tx func(context.Context, int64) error) (time.Duration, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	start := time.Now()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) || ctx.Err() != nil {
					return
				}
				if err := tx(ctx, i); err != nil {
					once.Do(func() { first = err })
					next.Store(int64(n)) // the others stop too
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return time.Since(start), first
}

// ordersDDL is the business table of the dialect.
func ordersDDL(dialect, orders string) string {
	id := "BIGSERIAL PRIMARY KEY"
	switch dialect {
	case "mysql":
		id = "BIGINT AUTO_INCREMENT PRIMARY KEY"
	case "sqlite":
		id = "INTEGER PRIMARY KEY AUTOINCREMENT"
	}
	return "CREATE TABLE " + orders + " (id " + id + ", customer VARCHAR(64) NOT NULL, amount_cents BIGINT NOT NULL, status VARCHAR(16) NOT NULL)"
}

func dialectName(dialect string) string {
	switch dialect {
	case "postgres":
		return "PostgreSQL"
	case "mysql":
		return "MySQL/MariaDB"
	}
	return "SQLite"
}

func writeEnqueueTable(w io.Writer, dialect string, rows []EnqueueRow) {
	fmt.Fprintf(w, "\n%s: one business row per transaction; overhead = time over the business transaction alone in the same round, median (min–max)\n\n| writers | form | tx/s | overhead |\n|---|---|---|---|\n", dialectName(dialect))
	for _, r := range rows {
		over := "(the limit)"
		if !r.Limit {
			over = fmt.Sprintf("%+.1f %% (%+.1f to %+.1f)", r.Overhead, r.OverheadMin, r.OverheadMax)
		}
		fmt.Fprintf(w, "| %d | %s | %.0f | %s |\n", r.Writers, r.Form, r.TxPerSec, over)
	}
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func minOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

func maxOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// plural is "1 writer", "8 writers", "2 relay processes".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "s") {
		return fmt.Sprintf("%d %ses", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
