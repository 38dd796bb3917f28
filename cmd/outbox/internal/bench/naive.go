package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	outbox "github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker"
	"github.com/outbox-go/outbox/store/driver"
)

// naiveDrain is the relay a user could write in an afternoon instead of
// adopting one, and the limit the relay's drain is read against: workers
// transactions in parallel, each taking up to batch NEW rows (a dead
// letter stays) in id order that no other transaction has locked (FOR UPDATE SKIP LOCKED), publishing
// every row at once through the same adapter (so with the same headers
// the relay sends), waiting for all the confirmations, deleting the rows
// and committing; a failed publish rolls the whole batch back. No order
// per key, no fencing, no retry schedule, no dead letters. It returns
// events/s from the first claim until want events were confirmed, and
// prints progress lines named phase to out meanwhile.
//
// MariaDB cannot lock with SKIP LOCKED in a DELETE, so there it selects
// FOR UPDATE SKIP LOCKED and deletes by id in the same transaction;
// SQLite has one writer at a time, so there it runs one transaction.
func naiveDrain(ctx context.Context, db *sql.DB, dialect, table string, br broker.Broker, workers, batch, want int, out io.Writer, phase string) (float64, error) {
	const cols = "id, event_id, topic, event_key, event_type, aggregate_type, schema_version, payload, content_type, headers, attempts, created_at"
	var claim, del string
	switch dialect {
	case "postgres":
		claim = "DELETE FROM " + table + " WHERE id IN (SELECT id FROM " + table + " WHERE status = 'NEW' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING " + cols
	case "mysql":
		claim = "SELECT " + cols + " FROM " + table + " WHERE status = 'NEW' ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED"
		del = "DELETE FROM " + table + " WHERE id IN (?%s)" // one mark per event claimed
	case "sqlite":
		claim = "DELETE FROM " + table + " WHERE id IN (SELECT id FROM " + table + " WHERE status = 'NEW' ORDER BY id LIMIT ?) RETURNING " + cols
		workers = 1
	default:
		return 0, fmt.Errorf("bench: naive relay: no SQL for the %s dialect", dialect)
	}
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	fail := func(err error) { once.Do(func() { firstErr = err }) }
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopProgress := progress(out, phase, want, done.Load)
	defer stopProgress()
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wctx.Err() == nil && done.Load() < int64(want) {
				n, err := naiveBatch(wctx, db, claim, del, br, batch)
				if err != nil {
					if wctx.Err() == nil {
						fail(err)
						cancel()
					}
					return
				}
				if n == 0 {
					time.Sleep(time.Millisecond) // the rows left are locked by the others
					continue
				}
				done.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return float64(done.Load()) / time.Since(start).Seconds(), nil
}

// naiveBatch runs one transaction of the naive relay and returns how
// many events it delivered.
func naiveBatch(ctx context.Context, db *sql.DB, claim, del string, br broker.Broker, batch int) (int, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, claim, batch)
	if err != nil {
		return 0, fmt.Errorf("bench: naive relay: claim: %w", err)
	}
	var events []outbox.Event
	for rows.Next() {
		var e outbox.Event
		var headers []byte
		var created any
		if err := rows.Scan(&e.ID, &e.EventID, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.SchemaVersion, &e.Payload, &e.ContentType, &headers, &e.Attempts, &created); err != nil {
			rows.Close()
			return 0, fmt.Errorf("bench: naive relay: %w", err)
		}
		if e.Headers, err = driver.DecodeHeaders(headers); err != nil {
			rows.Close()
			return 0, fmt.Errorf("bench: naive relay: %w", err)
		}
		if t, ok := created.(time.Time); ok {
			e.CreatedAt = t
		}
		events = append(events, e)
	}
	if err := rows.Close(); err != nil {
		return 0, fmt.Errorf("bench: naive relay: %w", err)
	}
	if len(events) == 0 {
		return 0, nil
	}
	if err := errors.Join(br.Publish(ctx, events)...); err != nil {
		return 0, fmt.Errorf("bench: naive relay: publish: %w", err)
	}
	if del != "" {
		args := make([]any, len(events))
		for i, e := range events {
			args[i] = e.ID
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(del, strings.Repeat(",?", len(events)-1)), args...); err != nil {
			if deadlock(err) {
				return 0, nil // rolled back: the rows go again (a naive relay duplicates)
			}
			return 0, fmt.Errorf("bench: naive relay: delete: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		if deadlock(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("bench: naive relay: commit: %w", err)
	}
	return len(events), nil
}

// deadlock says whether MariaDB chose this transaction as a deadlock's
// victim (error 1213), which a relay retries.
func deadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1213
}
